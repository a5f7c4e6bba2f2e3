// The devices page: the ledger's devices with their drain actions, then the kernel's topology.
import { api } from "./api.js";
import { DAX_NAME, drainAction } from "./device-actions.js";
import { h } from "./dom.js";
import { baseName, fmtBytes, pct } from "./format.js";
import { hostCell, loadHostNames } from "./hostnames.js";
import { kernelTables } from "./kernel.js";
import { emptyState, stateBadge, table } from "./widgets.js";

export const devicesPage = {
  title: "Devices",
  mount(root) {
    const st = { ledger: h("div", {}, emptyState("Loading…")), kernel: h("div", {}) };
    root.append(h("h1", {}, "Devices"), st.ledger,
      h("h2", {}, "Kernel topology (what `poold discover` sees)"), st.kernel);
    return st;
  },
  async refresh(st) {
    await loadHostNames();
    const [devices, topo] = await Promise.allSettled([api("/v1/devices"), api("/v1/topology")]);
    if (devices.status === "rejected") throw devices.reason;
    const topology = topo.status === "fulfilled" ? topo.value : null;
    const dax = new Map((topology?.dax_devices || []).map((d) => [baseName(d.chardev), d]));
    const byRegion = new Map((topology?.dax_regions || []).map((r) => [r.id, r]));
    st.ledger.replaceChildren(devices.value.length
      ? deviceTable(devices.value, dax, byRegion)
      : emptyState("No devices in the ledger: the daemon found no DAX device and emulation is off."));
    if (!topology) {
      st.kernel.replaceChildren(h("div", { class: "error-state" },
        `The kernel topology could not be read: ${topo.reason.message}`));
      return;
    }
    const known = new Set(devices.value.map((d) => baseName(d.chardev)));
    st.kernel.replaceChildren(...kernelTables(topology, known));
  },
};

function topologyOf(device, dax) {
  // The emulated device has no kernel object.
  return dax.get(baseName(device.chardev)) || dax.get(device.devname) || null;
}

function leasableOf(device, t) {
  if (device.state === "missing") return [false, "missing: gone from sysfs"];
  if (device.state === "draining") return [false, "draining: no new leases"];
  if (device.kind === "emulated") return [true, "emulated file"];
  if (t && !t.leasable) return [false, t.not_leasable_because || "not leasable"];
  return [true, t ? "devdax" : ""];
}

function deviceTable(devices, dax, byRegion) {
  // Short headers, and cells that may wrap, so the table fits a laptop screen unscrolled.
  const cols = ["Device", "Pool", "Host", "State", "Mode", "NUMA", "Backing", "Size", "Leased",
    "Leasable", "Actions"].map((label) => ({ key: label, label, num: ["Size", "Leased"].includes(label),
    title: { NUMA: "NUMA node", Backing: "memdev → CXL region → DAX region" }[label] }));
  const rows = devices.map((d) => {
    const t = topologyOf(d, dax);
    const [ok, why] = leasableOf(d, t);
    const region = t && byRegion.get(t.region_id);
    const backing = t ? [t.memdevs ? t.memdevs.map((m) => `${m.memdev} (serial ${m.serial})`).join(" + ") : null,
      t.cxl_region, region ? `dax region ${region.id}` : `dax region ${t.region_id}`]
      .filter(Boolean).join(" → ") : d.kind === "emulated" ? "a file (emulated)" : "—";
    const action = !DAX_NAME.test(d.devname)
      ? h("span", { class: "muted", title: "Only dax devices are drained" }, "—")
      : d.state === "draining"
        ? h("button", { class: "small ghost undrain", onclick: () => drainAction(d, "undrain") }, "Undrain")
        : h("button", { class: "small ghost drain", disabled: d.state === "missing",
          onclick: () => drainAction(d, "drain") }, "Drain");
    return h("tr", { "data-device": d.id },
      h("td", {}, h("b", {}, d.devname), h("div", { class: "muted mono", title: d.chardev }, shortPath(d.chardev))),
      h("td", {}, d.pool), hostCell(d.host),
      h("td", {}, stateBadge(d.state)), h("td", {}, t ? t.mode : d.kind),
      h("td", {}, d.numa_node ?? t?.numa_node ?? t?.target_node ?? "—"),
      h("td", { class: "wrap" }, backing),
      h("td", { class: "num" }, fmtBytes(d.size)),
      h("td", { class: "num" }, `${fmtBytes(d.leased_bytes)} (${pct(d.leased_bytes, d.size).toFixed(0)} %)`),
      h("td", { class: "wrap" }, stateBadge(ok ? "yes" : "no"), why ? ` ${why}` : ""),
      h("td", { class: "actions" }, action, " ", h("a", { href: `#/map/${d.id}` }, "Map")));
  });
  return table(cols, rows);
}

const shortPath = (path) => (path.length > 32 ? `…${path.slice(-30)}` : path);
