// The overview page: capacity per pool and per device, split into leased, scrubbing, idle, ...
import { api } from "./api.js";
import { h } from "./dom.js";
import { fmtBytes, pct } from "./format.js";
import { hostCell, loadHostNames } from "./hostnames.js";
import { trendChart } from "./trend.js";
import { emptyState, stateBadge, table } from "./widgets.js";

// The parts /v1/capacity splits a pool's or a device's bytes into, in drawing order.
const SPLIT = ["leased", "scrubbing", "idle", "draining", "free"];
const SPLIT_LABEL = {
  leased: "Leased", scrubbing: "Scrubbing", idle: "Claimed, idle", draining: "Draining", free: "Free",
};
const SPLIT_HELP = {
  leased: "held by active leases",
  scrubbing: "released, being zeroed",
  idle: "held by a host, not leased",
  draining: "not granted again",
  free: "unclaimed",
};

function splitBar(split, thin) {
  const el = h("div", { class: thin ? "bar thin" : "bar" });
  for (const kind of SPLIT) {
    if (split[kind] > 0 && kind !== "free") {
      el.append(h("span", {
        class: `seg-${kind}`, "data-kind": kind, style: { width: `${pct(split[kind], split.size)}%` },
        title: `${SPLIT_LABEL[kind]}: ${fmtBytes(split[kind])} (${pct(split[kind], split.size).toFixed(1)} %)`,
      }));
    }
  }
  return el;
}

function splitLegend() {
  return h("div", { class: "legend" }, SPLIT.map((kind) => h("span", { title: SPLIT_HELP[kind] },
    h("span", { class: `swatch seg-${kind}` }), `${SPLIT_LABEL[kind]} (${SPLIT_HELP[kind]})`)));
}

export const overviewPage = {
  title: "Overview",
  mount(root) {
    const pools = h("div", { class: "cards", id: "pools" }, emptyState("Loading…"));
    const devices = h("div", { id: "device-capacity" });
    root.append(h("h1", {}, "Capacity"), splitLegend(), pools, h("h2", {}, "Devices"), devices);
    return { pools, devices };
  },
  async refresh(st) {
    await loadHostNames();
    const [cap, history] = await Promise.all([api("/v1/capacity"), api("/v1/capacity/history")]);
    st.pools.replaceChildren(...(cap.pools.length
      ? cap.pools.map((p) => poolCard(p, history)) : [emptyState("No pools yet: the daemon has registered none.")]));
    if (!cap.devices.length) {
      st.devices.replaceChildren(emptyState(
        "No devices: the daemon found no DAX device and emulation is off."));
      return;
    }
    const cols = [
      { key: "devname", label: "Device" }, { key: "pool", label: "Pool" },
      { key: "host", label: "Host" }, { key: "state", label: "State" },
      { key: "numa", label: "NUMA", num: true }, { key: "size", label: "Size", num: true },
      { key: "bar", label: "Use" },
      ...SPLIT.map((k) => ({ key: k, label: SPLIT_LABEL[k], num: true })),
      { key: "leases", label: "Leases", num: true },
    ];
    const rows = cap.devices.map((d) => h("tr", { "data-device": d.id },
      h("td", {}, h("a", { href: `#/map/${d.id}`, title: "Memory map" }, d.devname),
        h("span", { class: "muted" }, ` ${d.kind}`)),
      h("td", {}, d.pool), hostCell(d.host), h("td", {}, stateBadge(d.state)),
      h("td", { class: "num" }, d.numa_node ?? "—"),
      h("td", { class: "num" }, fmtBytes(d.bytes.size)), h("td", {}, splitBar(d.bytes, true)),
      SPLIT.map((k) => h("td", { class: "num", "data-kind": k, "data-bytes": d.bytes[k] },
        fmtBytes(d.bytes[k]))),
      h("td", { class: "num" }, d.live_leases)));
    st.devices.replaceChildren(table(cols, rows));
  },
};

function poolCard(pool, history) {
  const b = pool.bytes;
  const notes = [`${pool.devices} device${pool.devices === 1 ? "" : "s"}`,
    `${pool.live_leases} live lease${pool.live_leases === 1 ? "" : "s"}`];
  if (pool.missing_devices) notes.push(`${pool.missing_devices} missing (not counted)`);
  return h("div", { class: "card pool", "data-pool": pool.name },
    h("h3", {}, `Pool ${pool.name}`, h("span", { class: "muted" }, ` · ${fmtBytes(b.size)}`)),
    h("div", { class: "muted" }, notes.join(" · ")),
    h("div", { style: { marginTop: "10px" } }, splitBar(b, false)),
    h("div", { class: "figures" }, SPLIT.map((k) => h("div", {
      class: "figure", "data-kind": k, "data-bytes": b[k],
    }, h("span", { class: `swatch seg-${k}` }), SPLIT_LABEL[k],
    h("b", {}, fmtBytes(b[k])), h("span", { class: "share" }, `${pct(b[k], b.size).toFixed(1)} %`)))),
    h("div", { class: "trend-wrap" }, h("div", { class: "muted" }, "The last hour"),
      trendChart(history.pools[pool.name] || [], history.window_s || 3600, history.period_s || 30)));
}
