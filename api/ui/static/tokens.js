// The tokens page: every bearer token (never a secret: the daemon keeps only digests). An admin
// creates one, whose secret is shown once, here, to be copied; and revokes one, after a
// confirmation, which every daemon of the ledger then refuses.
import { api } from "./api.js";
import { confirmDialog, toast } from "./chrome.js";
import { h } from "./dom.js";
import { NAME, field, showForm } from "./forms.js";
import { ago, fmtTime } from "./format.js";
import { tickNow } from "./poll.js";
import { emptyState, stateBadge, table } from "./widgets.js";

export const tokensPage = {
  title: "Tokens",
  mount(root) {
    const st = { body: h("div", { id: "tokens" }, emptyState("Loading…")), editor: h("div", { id: "token-editor" }) };
    root.append(h("div", { class: "page-head" }, h("h1", {}, "Tokens"),
      h("button", { id: "token-new", type: "button", onclick: () => newToken(st) }, "New token")),
    st.editor, st.body);
    return st;
  },
  async refresh(st) {
    const tokens = await api("/v1/tokens");
    const cols = ["Token", "Role", "Tenant", "Created", "State", ""].map((label) => ({ key: label, label }));
    st.body.replaceChildren(table(cols, tokens.map((t) => h("tr", { "data-token": t.id },
      h("td", {}, h("b", {}, t.name), h("div", { class: "muted mono" }, t.id)),
      h("td", {}, t.role), h("td", {}, t.tenant ?? "—"),
      h("td", { title: fmtTime(t.created_at) }, `${ago(t.created_at)} by ${t.created_by}`),
      h("td", { "data-field": "state" }, stateBadge(t.revoked_at ? "revoked" : "active")),
      h("td", { class: "actions" }, t.revoked_at ? null
        : h("button", { type: "button", class: "small danger", "data-action": "revoke", onclick: () => revoke(t) }, "Revoke"))))));
  },
};

function newToken(st) {
  const role = h("select", { name: "role" }, ["tenant", "agent", "admin"].map((r) => h("option", { value: r }, r)));
  const fields = [field("Name", "name", "", "who or what uses it, e.g. vllm-node-3"), h("label", {}, "Role", role),
    field("Tenant", "tenant", "", "for a tenant token")];
  showForm(st.editor, "New token", fields, async (data) => {
    const name = String(data.get("name")).trim();
    const tenant = String(data.get("tenant")).trim() || null;
    if (!name || name.length > 128) throw new Error("name: 1 to 128 characters");
    if ((role.value === "tenant") !== (tenant !== null)) throw new Error("a tenant token names its tenant; admin and agent tokens name none");
    if (tenant !== null && !NAME.test(tenant)) throw new Error("tenant: not a tenant name");
    if (!await confirmDialog(`Create a ${role.value} token for ${name}?`, tenant ? `It acts as tenant ${tenant}.` : `It acts as ${role.value === "admin" ? "an admin: everything" : "a host agent"}.`, "Create")) return false;
    const made = await api("/v1/tokens", { method: "POST", body: { name, role: role.value, tenant } });
    showSecret(st, made);
    return false; // the panel now shows the secret
  });
}

// The secret exists nowhere else: shown once, with a Copy button, until the admin closes it.
function showSecret(st, made) {
  const secret = h("input", { id: "token-secret", class: "mono", readonly: true, value: made.bearer, size: 60 });
  const copy = h("button", { type: "button", id: "token-copy", onclick: async () => {
    secret.select();
    try {
      await navigator.clipboard.writeText(made.bearer);
      toast("Token copied.");
    } catch {
      toast("Copy it from the field: this browser did not let the page use the clipboard.", "error");
    }
  } }, "Copy");
  st.editor.replaceChildren(h("div", { class: "panel", id: "token-made" },
    h("h2", {}, `Token ${made.name} created`),
    h("p", {}, "This is the only time the secret is shown: copy it now."),
    h("div", { class: "secret" }, secret, copy),
    h("div", { class: "actions" }, h("button", { type: "button", class: "ghost", id: "token-done", onclick: () => st.editor.replaceChildren() }, "Done"))));
  secret.select();
  tickNow();
}

async function revoke(t) {
  if (!await confirmDialog(`Revoke ${t.name}?`, `Every daemon of the ledger refuses it from the next request on${t.tenant ? `; ${t.tenant}'s leases stay until they end` : ""}.`, "Revoke")) return;
  try {
    await api(`/v1/tokens/${encodeURIComponent(t.id)}`, { method: "DELETE" });
    toast(`${t.name} revoked.`);
  } catch (exc) {
    if (exc.status !== 401) toast(`Revoke ${t.name} refused: ${exc.message}`, "error");
  }
  tickNow();
}
