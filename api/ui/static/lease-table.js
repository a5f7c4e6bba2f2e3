// The lease table, drawn by the leases page and the memory map, and its Revoke button.
import { api } from "./api.js";
import { confirmDialog, toast } from "./chrome.js";
import { h } from "./dom.js";
import { ago, fmtBytes, fmtExpiry, fmtTime, shortId } from "./format.js";
import { hostCell, hostName } from "./hostnames.js";
import { tickNow } from "./poll.js";
import { stateBadge, table } from "./widgets.js";

const LEASE_COLUMNS = [
  { key: "id", label: "Lease", sortable: true }, { key: "pool", label: "Pool", sortable: true },
  { key: "host", label: "Host", sortable: true }, { key: "tenant", label: "Tenant", sortable: true },
  { key: "device", label: "Device", sortable: true },
  { key: "offset", label: "Offset", num: true, sortable: true },
  { key: "length", label: "Size", num: true, sortable: true },
  { key: "generation", label: "Gen", num: true, sortable: true },
  { key: "state", label: "State", sortable: true }, { key: "labels", label: "Labels", sortable: true },
  { key: "granted_at", label: "Granted", sortable: true },
  { key: "expires_at", label: "Expires", sortable: true }, { key: "action", label: "" },
];

// compact: without pool, device and Revoke (the memory map's); sort: {key, dir, onSort}, or none.
export function leaseTable(leases, { compact = false, sort = null } = {}) {
  const columns = compact
    ? LEASE_COLUMNS.filter((c) => !["pool", "device", "action"].includes(c.key)) : LEASE_COLUMNS;
  const rows = leases.map((l) => h("tr", { "data-lease": l.id, "data-state": l.state },
    columns.map((c) => leaseCell(l, c.key))));
  return table(columns, rows, sort);
}

function leaseCell(l, key) {
  switch (key) {
    case "id": return h("td", { class: "mono", title: l.id }, shortId(l.id));
    case "host": return hostCell(l.host, "—");
    case "tenant": return h("td", {}, l.tenant ?? h("span", { class: "muted" }, "—"));
    case "device": return h("td", {}, h("a", { href: `#/map/${l.device_id}` }, l.device));
    case "offset": return h("td", { class: "num" }, fmtBytes(l.offset));
    case "length": return h("td", { class: "num" }, fmtBytes(l.length));
    case "generation": return h("td", { class: "num" }, String(l.generation));
    case "state": return h("td", { class: "lease-state" }, stateBadge(l.state), elasticTags(l));
    case "labels": return h("td", { class: "wrap" },
      Object.entries(l.labels || {}).map(([k, v]) => h("span", { class: "label" }, `${k}=${v}`)));
    case "granted_at": return h("td", { title: fmtTime(l.granted_at) }, ago(l.granted_at));
    case "expires_at": return h("td", { title: fmtTime(l.expires_at) }, fmtExpiry(l));
    case "action": return h("td", {}, l.state === "active"
      ? h("button", { class: "small danger revoke", "data-lease": l.id, onclick: () => revoke(l) }, "Revoke")
      : null);
    default: return h("td", {}, l[key] ?? "—");
  }
}

// An elastic lease (a cache its holder gives back on request) is tagged; one the daemon asked
// back, for a grant waiting for room, says by when it must be given back or be revoked.
export function elasticTags(l) {
  if (!l.elastic) return null;
  if (l.reclaim_by && l.state === "active") {
    return h("span", { class: "tag reclaiming", title: `asked back: revoked at ${fmtTime(l.reclaim_by)} unless given back` },
      `give back by ${fmtTime(l.reclaim_by)}`);
  }
  return h("span", { class: "tag elastic", title: "a cache its holder gives back when a grant waits for room" }, "elastic");
}

async function revoke(lease) {
  const ok = await confirmDialog("Revoke this lease?",
    `Lease ${lease.id} (${fmtBytes(lease.length)} on ${lease.device}, tenant ${lease.tenant ?? "none"}, `
    + `host ${hostName(lease.host)}) ends now. Its holder learns at its next keepalive and must stop using the memory.`,
    "Revoke lease");
  if (!ok) return;
  try {
    const ended = await api(`/v1/leases/${encodeURIComponent(lease.id)}/revoke`, { method: "POST" });
    toast(`Lease ${shortId(lease.id)} is ${ended.state}.`);
  } catch (exc) {
    if (exc.status !== 401) toast(`Revoke failed: ${exc.message}`, "error");
  }
  tickNow();
}
