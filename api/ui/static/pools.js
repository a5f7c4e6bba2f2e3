// The pools page: every pool's policy, usage and tenants' quotas. An admin creates, edits and
// retires pools and sets quotas; each change is confirmed first and judged by the daemon, whose
// refusal is shown as it said it (the ledger checks everything before it writes: a refused
// change leaves the pool as it was).
import { api } from "./api.js";
import { confirmDialog, toast } from "./chrome.js";
import { h } from "./dom.js";
import { fmtBytes, fmtDuration, parseBytes } from "./format.js";
import { NAME, check, field, quotaFrom, quotaText, showForm } from "./forms.js";
import { drawRules, editRules } from "./pool-rules.js";
import { tickNow } from "./poll.js";
import { emptyState, table } from "./widgets.js";

const UNITS = [["TiB", 4], ["GiB", 3], ["MiB", 2], ["KiB", 1]];

// A size as the form shows it for editing: exact (fmtBytes rounds; saving that would change it).
function exact(n) {
  const unit = UNITS.find(([, power]) => n >= 1024 ** power && n % 1024 ** power === 0);
  return unit ? `${n / 1024 ** unit[1]}${unit[0]}` : String(n);
}

export const poolsPage = {
  title: "Pools",
  mount(root) {
    const st = { body: h("div", { id: "pools" }, emptyState("Loading…")), editor: h("div", { id: "pool-editor" }),
      rules: h("div", { id: "pool-rules" }) };
    root.append(h("div", { class: "page-head" }, h("h1", {}, "Pools"),
      h("button", { id: "pool-new", type: "button", onclick: () => editPool(st, null) }, "New pool")),
    st.editor, st.body,
    h("div", { class: "page-head" }, h("h2", {}, "Placement rules"),
      h("button", { id: "rules-edit", type: "button", class: "ghost", onclick: () => editRules(st) }, "Edit rules")),
    st.rules);
    return st;
  },
  async refresh(st) {
    const [pools, devices, rules] = await Promise.all([api("/v1/pools"), api("/v1/devices"), api("/v1/pool-rules")]);
    st.assigned = {};
    for (const d of devices) if (d.pool_assigned && d.state !== "missing") st.assigned[d.pool] = (st.assigned[d.pool] || 0) + 1;
    st.ruleList = rules.rules;
    drawRules(st, rules);
    // Few columns, each wrapping: the policy and tenant lists grow long, laptops stay narrow.
    const cols = ["Pool", "Capacity", "Policy", "Tenants and quotas", ""].map((label) => ({ key: label, label }));
    st.body.replaceChildren(table(cols, pools.map((p) => poolRow(st, p))));
  },
};

function poolRow(st, p) {
  const disagrees = p.config_disagrees.length
    ? h("div", { class: "warn-text", title: p.config_disagrees.map((d) => `${d.setting}: this host's file says ${JSON.stringify(d.file)}, the ledger ${JSON.stringify(d.ledger)}`).join("\n") },
      `this host's config disagrees (${p.config_disagrees.map((d) => d.setting).join(", ")}); the ledger wins`)
    : null;
  const line = (field, text) => h("div", { "data-field": field }, text);
  return h("tr", { "data-pool": p.name },
    h("td", { class: "wrap" }, h("b", {}, p.name), p.description ? h("div", { class: "muted" }, p.description) : null, disagrees),
    h("td", { class: "wrap" },
      line("leased", `${fmtBytes(p.leased_bytes)} leased of ${fmtBytes(p.size)}`),
      line("available", `${fmtBytes(p.available_bytes)} available`),
      line("devices", `${p.devices} device${p.devices === 1 ? "" : "s"}`),
      st.assigned && st.assigned[p.name] ? line("assigned", `${st.assigned[p.name]} put here by hand`) : null),
    h("td", { class: "wrap" },
      line("scrub", p.scrub_on_release ? "zeroed on release" : "not scrubbed"),
      line("isolation", p.trusted ? "trusted: whole devices shared" : "one tenant per whole device"),
      line("ttl", `TTL ${fmtDuration(p.default_ttl_s)}, at most ${fmtDuration(p.max_ttl_s)}`),
      line("largest", `largest lease: ${p.max_lease_size === null ? "no limit" : fmtBytes(p.max_lease_size)}`)),
    h("td", { class: "wrap" },
      line("tenants", p.allowed_tenants === null ? "everyone" : p.allowed_tenants.join(", ") || "nobody"),
      h("div", { "data-field": "quotas" }, p.quotas.map((q) => h("div", { "data-tenant": q.tenant, class: "muted" },
        `${q.tenant}: ${fmtBytes(q.leased_bytes)} of ${q.max_bytes === null ? "∞" : fmtBytes(q.max_bytes)}, `
        + `${q.live_leases} of ${q.max_leases === null ? "∞" : q.max_leases} leases`)))),
    h("td", { class: "actions" },
      h("button", { type: "button", class: "small", "data-action": "edit", onclick: () => editPool(st, p) }, "Edit"),
      h("button", { type: "button", class: "small ghost", "data-action": "quota", onclick: () => editQuota(st, p) }, "Quota"),
      h("button", { type: "button", class: "small ghost", "data-action": "move", onclick: () => moveDevice(st, p) }, "Move a device here"),
      h("button", { type: "button", class: "small danger", "data-action": "retire", onclick: () => retirePool(p) }, "Retire")));
}

function policyFrom(data, form, p) {
  // What the form says, checked as the daemon will; throws with the first problem.
  const int = (name) => {
    const text = String(data.get(name)).trim();
    if (!/^\d+$/.test(text) || Number(text) < 1) throw new Error(`${name}: a whole number of seconds, at least 1`);
    return Number(text);
  };
  const size = (name, empty) => {
    const text = String(data.get(name)).trim();
    if (text === "") return empty;
    const n = parseBytes(text);
    if (Number.isNaN(n)) throw new Error(`${name}: not a size (e.g. 1GiB)`);
    return n;
  };
  const tenants = String(data.get("allowed_tenants")).split(/[\s,]+/).filter(Boolean);
  const bad = tenants.find((t) => !NAME.test(t));
  if (bad) throw new Error(`allowed_tenants: ${bad} is not a tenant name`);
  const policy = {
    description: String(data.get("description")).trim(),
    default_ttl_s: int("default_ttl_s"), max_ttl_s: int("max_ttl_s"),
    claim_slice: size("claim_slice", p ? p.claim_slice : undefined),
    max_lease_size: size("max_lease_size", null),
    scrub_on_release: form.elements.scrub_on_release.checked,
    trusted: form.elements.trusted.checked,
    allowed_tenants: tenants.length ? tenants : null,
  };
  if (policy.default_ttl_s > policy.max_ttl_s) throw new Error("default_ttl_s must not exceed max_ttl_s");
  if (policy.claim_slice === undefined) delete policy.claim_slice;
  return policy;
}

function editPool(st, p) {
  const fields = [
    p ? null : field("Name", "name", "", "e.g. gpu-kv"),
    field("Description", "description", p ? p.description : ""),
    field("Default TTL (s)", "default_ttl_s", p ? p.default_ttl_s : 60),
    field("Maximum TTL (s)", "max_ttl_s", p ? p.max_ttl_s : 86400),
    field("Claim slice", "claim_slice", p ? exact(p.claim_slice) : "", "e.g. 1GiB; 0: whole devices"),
    field("Largest lease", "max_lease_size", p && p.max_lease_size !== null ? exact(p.max_lease_size) : "", "empty: no limit"),
    field("Tenants allowed", "allowed_tenants", p && p.allowed_tenants ? p.allowed_tenants.join(", ") : "", "empty: everyone"),
    check("Zero released bytes before reuse", "scrub_on_release", p ? p.scrub_on_release : true),
    check("Trusted (tenants share devices handed out whole)", "trusted", p ? p.trusted : false),
  ];
  showForm(st.editor, p ? `Edit pool ${p.name}` : "New pool", fields, async (data, form) => {
    const policy = policyFrom(data, form, p);
    if (!p) {
      const name = String(data.get("name")).trim();
      if (!NAME.test(name)) throw new Error("name: letters, digits, '.', '_' or '-', starting with a letter or digit");
      if (!await confirmDialog(`Create pool ${name}?`, summary(policy), "Create")) return false;
      await api("/v1/pools", { method: "POST", body: { name, ...policy } });
      toast(`Pool ${name} created.`);
      return true;
    }
    const changes = Object.fromEntries(Object.entries(policy).filter(([k, v]) => JSON.stringify(v) !== JSON.stringify(p[k])));
    if (!Object.keys(changes).length) { toast("Nothing to change."); return true; }
    if (!await confirmDialog(`Change pool ${p.name}?`, `${summary(changes)}. Live leases keep their bytes; the next grant on every host obeys.`, "Change")) return false;
    await api(`/v1/pools/${encodeURIComponent(p.name)}`, { method: "PATCH", body: changes });
    toast(`Pool ${p.name} changed.`);
    return true;
  });
}

function summary(policy) {
  return Object.entries(policy).map(([k, v]) => `${k}: ${v === null ? "none" : Array.isArray(v) ? v.join(", ") : v}`).join("; ");
}

function editQuota(st, p) {
  const fields = [
    field("Tenant", "tenant", "", "e.g. team-a"),
    field("Bytes at most", "max_bytes", "", "e.g. 64GiB; empty: unlimited"),
    field("Leases at most", "max_leases", "", "empty: unlimited"),
    check("Clear the tenant's quota in this pool instead", "clear", false),
  ];
  showForm(st.editor, `A tenant's quota in ${p.name}`, fields, async (data, form) => {
    const tenant = String(data.get("tenant")).trim();
    if (!NAME.test(tenant)) throw new Error("tenant: not a tenant name");
    const path = `/v1/pools/${encodeURIComponent(p.name)}/quotas/${encodeURIComponent(tenant)}`;
    if (form.elements.clear.checked) {
      if (!await confirmDialog(`Clear ${tenant}'s quota in ${p.name}?`, "Its global quotas still hold.", "Clear")) return false;
      await api(path, { method: "DELETE" });
      toast(`${tenant} has no quota of its own in ${p.name}.`);
      return true;
    }
    const body = quotaFrom(data);
    if (!await confirmDialog(`Set ${tenant}'s quota in ${p.name}?`, `${quotaText(body)}. Leases it holds stay; new grants are judged against it.`, "Set quota")) return false;
    await api(path, { method: "PUT", body });
    toast(`${tenant}'s quota in ${p.name} set.`);
    return true;
  });
}

async function moveDevice(st, p) {
  const devices = (await api("/v1/devices")).filter((d) => d.pool !== p.name && d.state !== "missing");
  if (!devices.length) { toast(`Every present device is in ${p.name} already.`); return; }
  const select = h("select", { name: "device_id" }, devices.map((d) => h("option", { value: d.id },
    `${d.devname} on ${d.host || "every host (shared)"}: ${fmtBytes(d.size)}, in ${d.pool}, ${d.live_leases} live lease(s)`)));
  showForm(st.editor, `Move a device into ${p.name}`, [h("label", {}, "Device", select)], async (data) => {
    const device = devices.find((d) => String(d.id) === String(data.get("device_id")));
    if (!await confirmDialog(`Move ${device.devname} into ${p.name}?`, `From ${device.pool}. Refused while a lease holds bytes on it or another host holds a claim on it: drain it first and let them end. It stays in ${p.name} across restarts.`, "Move")) return false;
    await api(`/v1/pools/${encodeURIComponent(p.name)}/devices`, { method: "POST", body: { device_id: device.id } });
    toast(`${device.devname} moved into ${p.name}.`);
    return true;
  });
}

async function retirePool(p) {
  if (!await confirmDialog(`Retire pool ${p.name}?`, "It will grant nothing and take no device; its name and history stay, and creating it again brings it back. Refused while a device is in it.", "Retire")) return;
  try {
    await api(`/v1/pools/${encodeURIComponent(p.name)}`, { method: "DELETE" });
    toast(`Pool ${p.name} retired.`);
  } catch (exc) {
    if (exc.status !== 401) toast(`Retire ${p.name} refused: ${exc.message}`, "error");
  }
  tickNow();
}
