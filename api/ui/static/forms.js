// Forms on a page (pools, tenants, tokens): one at a time, above the page's table, which the
// poll redraws while the form stays. `submit(data, form)` checks, confirms and calls the API;
// it resolves true when done (the form closes), false when the admin cancelled (it stays), and
// a throw is shown in the form as the API said it.
import { h } from "./dom.js";
import { fmtBytes, parseBytes } from "./format.js";
import { tickNow } from "./poll.js";

// A pool's or a tenant's name, as the API takes it.
export const NAME = /^[A-Za-z0-9][\w.-]{0,127}$/;

// The quota fields of a form (max_bytes, max_leases; empty: unlimited) as the API's body.
export function quotaFrom(data) {
  const bytesText = String(data.get("max_bytes")).trim();
  const leasesText = String(data.get("max_leases")).trim();
  const maxBytes = bytesText === "" ? null : parseBytes(bytesText);
  if (Number.isNaN(maxBytes)) throw new Error("max_bytes: not a size (e.g. 64GiB)");
  if (leasesText !== "" && !/^\d+$/.test(leasesText)) throw new Error("max_leases: a whole number");
  return { max_bytes: maxBytes, max_leases: leasesText === "" ? null : Number(leasesText) };
}

export const quotaText = (q) => `${q.max_bytes === null ? "unlimited bytes" : fmtBytes(q.max_bytes)}, `
  + `${q.max_leases === null ? "unlimited" : q.max_leases} leases at most`;

export function field(label, name, value, hint) {
  return h("label", {}, label, h("input", { name, value: value ?? "", placeholder: hint || "", autocomplete: "off" }));
}

export function check(label, name, on) {
  return h("label", { class: "check" }, h("input", { type: "checkbox", name, checked: on }), label);
}

export function showForm(editor, title, fields, submit) {
  const error = h("p", { class: "form-error", role: "alert", hidden: true });
  const form = h("form", { class: "panel", id: "page-form" }, h("h2", {}, title), h("div", { class: "fields" }, fields), error,
    h("div", { class: "actions" },
      h("button", { type: "button", class: "ghost", id: "page-form-cancel", onclick: () => editor.replaceChildren() }, "Cancel"),
      h("button", { type: "submit", id: "page-form-save" }, "Save")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    try {
      if (await submit(new FormData(form), form)) editor.replaceChildren();
    } catch (exc) {
      if (exc.status === 401) return;
      error.textContent = exc.message;
      error.hidden = false;
    }
    tickNow();
  });
  editor.replaceChildren(form);
  form.querySelector("input, select, textarea").focus();
}
