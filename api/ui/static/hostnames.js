// Hosts by name. The ledger keys a host by its machine id (32 hex digits), which crowds every
// table: pages show the host's name, with the id on hover (and in a lease's details). Names come
// from /v1/hosts, read again at most every REFRESH_MS; a name two hosts share is told apart by
// the id's first digits; a host the list does not know yet shows its id.
import { api } from "./api.js";
import { h } from "./dom.js";

const REFRESH_MS = 10000;
let labels = new Map();
let readAt = 0;

export async function loadHostNames() {
  if (Date.now() - readAt < REFRESH_MS) return;
  readAt = Date.now();
  try {
    const hosts = await api("/v1/hosts");
    const uses = new Map();
    for (const x of hosts) uses.set(x.name, (uses.get(x.name) || 0) + 1);
    labels = new Map(hosts.map((x) => [x.id, uses.get(x.name) > 1 ? `${x.name} (${x.id.slice(0, 8)})` : x.name]));
  } catch (exc) {
    if (exc.status === 401) throw exc; // else the ids, until the next reading
  }
}

export const hostName = (id) => (id === null || id === undefined ? null : labels.get(id) ?? id);

// A table cell: the name, the id on hover; `none` for no host (a device every host shares).
export function hostCell(id, none = "shared") {
  if (id === null || id === undefined) return h("td", {}, none);
  return h("td", { class: "host", title: id, "data-host-id": id }, hostName(id));
}
