// The events page: the audit log, newest first, live, filtered by kind.
import { api } from "./api.js";
import { h } from "./dom.js";
import { ago, fmtTime, shortId } from "./format.js";
import { hostCell, loadHostNames } from "./hostnames.js";
import { emptyState, table } from "./widgets.js";

export const eventsPage = {
  title: "Events",
  mount(root) {
    const st = { events: [], newest: null, kind: "" };
    const input = h("input", { id: "filter-kind", type: "search", placeholder: "e.g. lease. or device.changed",
      oninput: () => { st.kind = input.value.trim(); drawEvents(st, new Set()); } });
    st.count = h("span", { class: "count" });
    st.body = h("div", { id: "events" }, emptyState("Loading…"));
    root.append(h("h1", {}, "Events"), h("div", { class: "toolbar" }, h("label", {}, "Kind", input),
      h("span", { class: "muted" }, "The audit log, newest first, live."), st.count), st.body);
    return st;
  },
  async refresh(st) {
    await loadHostNames();
    const fresh = st.newest === null
      ? await api("/v1/events?limit=300")
      : await api(`/v1/events?limit=1000&after_id=${st.newest}`);
    if (st.newest !== null && !fresh.length) return;
    const ids = new Set(st.newest === null ? [] : fresh.map((e) => e.id));
    st.events = [...fresh, ...st.events].slice(0, 2000);
    st.newest = st.events.length ? st.events[0].id : 0;
    drawEvents(st, ids);
  },
};

function drawEvents(st, freshIds) {
  const shown = st.events.filter((e) => !st.kind || e.kind.startsWith(st.kind) || e.kind.includes(st.kind));
  st.count.textContent = `${shown.length} shown`;
  if (!shown.length) {
    st.body.replaceChildren(emptyState(st.events.length ? "No event matches this kind." : "No events yet."));
    return;
  }
  const cols = ["#", "Time", "Kind", "Actor", "Host", "Device", "Lease", "Details"]
    .map((label) => ({ key: label, label, num: label === "#" }));
  const rows = shown.map((e) => h("tr", { "data-event": e.id, class: freshIds.has(e.id) ? "fresh" : null },
    h("td", { class: "num" }, String(e.id)), h("td", { title: ago(e.at) }, fmtTime(e.at)),
    h("td", {}, h("span", { class: `state ${e.kind.split(".")[1] || ""}` }, e.kind)),
    h("td", {}, e.actor), hostCell(e.host, "—"),
    h("td", {}, e.device_id ? h("a", { href: `#/map/${e.device_id}` }, String(e.device_id)) : "—"),
    h("td", { class: "mono", title: e.lease_id || "" }, e.lease_id ? shortId(e.lease_id) : "—"),
    h("td", { class: "wrap mono" }, Object.entries(e.details || {})
      .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" "))));
  st.body.replaceChildren(table(cols, rows));
}
