// The tenants page: every tenant, its global quotas and what it holds against them, its quotas
// in each pool, and a link to its leases. An admin creates a tenant or changes its quotas, each
// change confirmed first.
import { api } from "./api.js";
import { confirmDialog, toast } from "./chrome.js";
import { h } from "./dom.js";
import { NAME, field, quotaFrom, quotaText, showForm } from "./forms.js";
import { fmtBytes } from "./format.js";
import { showLeasesMatching } from "./leases.js";
import { emptyState, table } from "./widgets.js";

export const tenantsPage = {
  title: "Tenants",
  mount(root) {
    const st = { body: h("div", { id: "tenants" }, emptyState("Loading…")), editor: h("div", { id: "tenant-editor" }) };
    root.append(h("div", { class: "page-head" }, h("h1", {}, "Tenants"),
      h("button", { id: "tenant-new", type: "button", onclick: () => editTenant(st, null) }, "New tenant")),
    st.editor, st.body);
    return st;
  },
  async refresh(st) {
    const [tenants, pools] = await Promise.all([api("/v1/tenants"), api("/v1/pools")]);
    if (!tenants.length) {
      st.body.replaceChildren(emptyState("No tenants yet: one appears with its first token, lease or quota."));
      return;
    }
    const inPools = {};
    for (const p of pools) for (const q of p.quotas) (inPools[q.tenant] ||= []).push([p.name, q]);
    const cols = ["Tenant", "Bytes", "Leases", "Quotas in pools", ""].map((label) => ({ key: label, label }));
    st.body.replaceChildren(table(cols, tenants.map((t) => h("tr", { "data-tenant": t.name },
      h("td", {}, h("b", {}, t.name)),
      h("td", { "data-field": "bytes" }, `${fmtBytes(t.leased_bytes)} of ${t.max_bytes === null ? "unlimited" : fmtBytes(t.max_bytes)}`),
      h("td", { "data-field": "leases" }, `${t.live_leases} of ${t.max_leases === null ? "unlimited" : t.max_leases}`),
      h("td", { class: "wrap" }, (inPools[t.name] || []).map(([pool, q]) => h("div", { class: "muted" },
        `${pool}: ${fmtBytes(q.leased_bytes)} of ${q.max_bytes === null ? "∞" : fmtBytes(q.max_bytes)}, `
        + `${q.live_leases} of ${q.max_leases === null ? "∞" : q.max_leases} leases`))),
      h("td", { class: "actions" },
        h("button", { type: "button", class: "small", "data-action": "quotas", onclick: () => editTenant(st, t) }, "Quotas"),
        h("a", { href: "#/leases", "data-action": "leases", onclick: () => showLeasesMatching({ tenant: t.name }) }, "Leases"))))));
  },
};

function editTenant(st, t) {
  const fields = [
    t ? null : field("Name", "name", "", "e.g. team-a"),
    field("Bytes at most", "max_bytes", t && t.max_bytes !== null ? String(t.max_bytes) : "", "e.g. 64GiB; empty: unlimited"),
    field("Leases at most", "max_leases", t && t.max_leases !== null ? String(t.max_leases) : "", "empty: unlimited"),
  ];
  showForm(st.editor, t ? `Quotas of ${t.name}` : "New tenant", fields, async (data) => {
    const name = t ? t.name : String(data.get("name")).trim();
    if (!NAME.test(name)) throw new Error("name: letters, digits, '.', '_' or '-', starting with a letter or digit");
    const body = quotaFrom(data);
    const what = `${quotaText(body)}. Leases it holds stay; new grants are judged against these.`;
    if (!await confirmDialog(t ? `Change ${name}'s quotas?` : `Create tenant ${name}?`, what, t ? "Change" : "Create")) return false;
    await api(`/v1/tenants/${encodeURIComponent(name)}`, { method: "PUT", body });
    toast(t ? `${name}'s quotas changed.` : `Tenant ${name} created.`);
    return true;
  });
}
