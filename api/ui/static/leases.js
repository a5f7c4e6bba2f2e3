// The leases page: every lease, filtered and sorted as the admin chooses.
import { api } from "./api.js";
import { h } from "./dom.js";
import { labelsText } from "./format.js";
import { hostName, loadHostNames } from "./hostnames.js";
import { leaseTable } from "./lease-table.js";
import { emptyState } from "./widgets.js";

const LEASE_STATES = ["active", "scrubbing", "expired", "released", "revoked", "lost"];

// The filters and the sort outlive the page: they are as the admin left them on coming back.
const leaseView = {
  filters: { state: "", pool: "", host: "", tenant: "", label: "", q: "" },
  sort: { key: "granted_at", dir: -1 },
};

// Another page sends the admin here showing some leases only (a tenant's, say).
export function showLeasesMatching(filters) {
  Object.assign(leaseView.filters, { state: "", pool: "", host: "", tenant: "", label: "", q: "" }, filters);
}

function leaseMatches(l, f) {
  if (f.state && l.state !== f.state) return false;
  if (f.pool && l.pool !== f.pool) return false;
  if (f.host && l.host !== f.host) return false;
  if (f.tenant && !(l.tenant ?? "").toLowerCase().includes(f.tenant.toLowerCase())) return false;
  if (f.q && !l.id.includes(f.q.trim())) return false;
  if (f.label) {
    const [k, v] = f.label.split("=", 2).map((s) => s.trim());
    const labels = l.labels || {};
    if (v !== undefined ? labels[k] !== v : !(k in labels) && !labelsText(labels).includes(k)) return false;
  }
  return true;
}

function sortValue(l, key) {
  if (key === "labels") return labelsText(l.labels);
  if (key === "granted_at" || key === "expires_at") return Date.parse(l[key]);
  return l[key] ?? "";
}

// `labelOf` names each value (a host's name for its id).
function selectOf(id, label, values, current, onChange, labelOf = (v) => v) {
  const select = h("select", { id, onchange: () => onChange(select.value) },
    h("option", { value: "" }, "all"), values.map((v) => h("option", { value: v }, labelOf(v))));
  select.value = current;
  return h("label", {}, label, select);
}

export const leasesPage = {
  title: "Leases",
  mount(root) {
    const st = { data: null, choices: "" };
    st.controls = h("div", { class: "toolbar" });
    st.body = h("div", { id: "leases" }, emptyState("Loading…"));
    root.append(h("h1", {}, "Leases"), st.controls, st.body);
    return st;
  },
  async refresh(st) {
    await loadHostNames();
    st.data = await api("/v1/leases?limit=1000");
    drawLeases(st);
  },
};

function drawLeases(st) {
  const f = leaseView.filters;
  const uniq = (key) => [...new Set(st.data.map((l) => l[key]))].sort();
  const choices = JSON.stringify([uniq("pool"), uniq("host")]);
  if (choices !== st.choices) {
    // Rebuilt only when the choices change, so an open select or a focused input is left alone.
    st.choices = choices;
    const set = (key) => (value) => { f[key] = value; drawLeases(st); };
    const text = (key, label, placeholder) => {
      const input = h("input", { id: `filter-${key}`, type: "search", placeholder, value: f[key],
        oninput: () => set(key)(input.value) });
      return h("label", {}, label, input);
    };
    st.count = h("span", { class: "count", id: "lease-count" });
    st.controls.replaceChildren(
      selectOf("filter-state", "State", LEASE_STATES, f.state, set("state")),
      selectOf("filter-pool", "Pool", uniq("pool"), f.pool, set("pool")),
      selectOf("filter-host", "Host", uniq("host"), f.host, set("host"), hostName),
      text("tenant", "Tenant", "contains…"), text("label", "Label", "key or key=value"),
      text("q", "Lease id", "contains…"), st.count);
  }
  const { key, dir } = leaseView.sort;
  const shown = st.data.filter((l) => leaseMatches(l, f)).sort((a, b) => {
    const x = sortValue(a, key);
    const y = sortValue(b, key);
    return (x < y ? -1 : x > y ? 1 : 0) * dir;
  });
  st.count.textContent = `${shown.length} of ${st.data.length} lease${st.data.length === 1 ? "" : "s"}`
    + (st.data.length >= 1000 ? " (the newest 1000)" : "");
  const onSort = (k) => {
    leaseView.sort = { key: k, dir: leaseView.sort.key === k ? -leaseView.sort.dir : 1 };
    drawLeases(st);
  };
  if (!st.data.length) {
    st.body.replaceChildren(emptyState("No leases yet. Clients lease with POST /v1/leases."));
  } else if (!shown.length) {
    st.body.replaceChildren(emptyState("No lease matches these filters."));
  } else {
    st.body.replaceChildren(leaseTable(shown, { sort: { ...leaseView.sort, onSort } }));
  }
}
