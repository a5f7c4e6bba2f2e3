// Forms on a page (pools, tenants, tokens): one at a time, above the page's table, which the
// poll redraws while the form stays. `submit(data, form)` checks, confirms and calls the API;
// it resolves true when done (the form closes), false when the admin cancelled (it stays), and
// a throw is shown in the form as the API said it.
import { h } from "./dom.js";
import { tickNow } from "./poll.js";

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
