// The devices page's kernel topology: DAX devices and regions, CXL memdevs and regions, NUMA nodes.
import { createAction, destroyAction, reconfigureAction, resizeAction } from "./device-actions.js";
import { h } from "./dom.js";
import { baseName, fmtBytes } from "./format.js";
import { emptyState, stateBadge, table } from "./widgets.js";

export function kernelTables(topo, known) {
  const out = [];
  const daxRows = (topo.dax_devices || []).map((d) => h("tr", { "data-dax": baseName(d.chardev) },
    h("td", {}, d.chardev), h("td", {}, String(d.region_id)), h("td", {}, d.nd_region ?? "—"),
    h("td", {}, d.cxl_region ?? "—"),
    h("td", {}, d.memdevs ? d.memdevs.map((m) => m.memdev).join(", ") : "—"),
    h("td", {}, d.numa_node ?? "—"), h("td", {}, d.target_node ?? "—"), h("td", {}, d.mode ?? "—"),
    h("td", {}, d.state ?? "—"), h("td", { class: "num" }, fmtBytes(d.size)),
    h("td", { class: "wrap" }, stateBadge(d.leasable ? "yes" : "no"),
      d.leasable ? "" : ` ${d.not_leasable_because}`),
    h("td", {}, known.has(baseName(d.chardev)) ? "yes" : "no"),
    h("td", { class: "actions" }, h("button", { class: "small ghost reconfigure", onclick: () => reconfigureAction(d) },
      d.mode === "system-ram" ? "To devdax" : "To system-ram"), " ",
    h("button", { class: "small ghost resize", onclick: () => resizeAction(d) }, "Resize"), " ",
    h("button", { class: "small ghost destroy", onclick: () => destroyAction(d) }, "Destroy"))));
  out.push(h("h2", {}, "DAX devices"), daxRows.length
    ? table(["DAX device", "DAX region", "nd region", "CXL region", "Memdevs", "NUMA",
      "Target node", "Mode", "State", "Size", "Leasable", "In ledger", "Actions"]
      .map((label) => ({ key: label, label, num: label === "Size", title: label === "NUMA" ? "NUMA node" : null })), daxRows)
    : emptyState("The kernel shows no DAX device."));
  const regionRowsDax = (topo.dax_regions || []).map((r) => h("tr", { "data-dax-region": r.id },
    h("td", {}, `region${r.id}`), h("td", { class: "mono" }, r.path),
    h("td", { class: "num" }, fmtBytes(r.size)), h("td", { class: "num" }, fmtBytes(r.available_size)),
    h("td", {}, fmtBytes(r.align)), h("td", {}, r.dynamic ? "dynamic" : "static"),
    h("td", {}, (r.devices || []).map(baseName).join(", ") || "—"),
    h("td", {}, r.dynamic && r.available_size > 0
      ? h("button", { class: "small ghost create", onclick: () => createAction(r) }, "New device") : "")));
  if (regionRowsDax.length) {
    out.push(h("h2", {}, "DAX regions"), table(["DAX region", "Path", "Size", "Available", "Align",
      "Kind", "Devices", "Actions"].map((label) => ({ key: label, label, num: ["Size", "Available"].includes(label) })),
    regionRowsDax));
  }
  const memdevRows = (topo.memdevs || []).map((m) => h("tr", {},
    h("td", {}, m.memdev), h("td", {}, m.serial ?? "—"), h("td", {}, m.host ?? "—"),
    h("td", { class: "num" }, fmtBytes(m.ram_size)), h("td", { class: "num" }, fmtBytes(m.pmem_size)),
    h("td", {}, m.numa_node ?? "—"), h("td", {}, m.firmware_version ?? "—")));
  out.push(h("h2", {}, "CXL memdevs"), memdevRows.length
    ? table(["Memdev", "Serial", "Host", "RAM", "PMEM", "NUMA node", "Firmware"]
      .map((label) => ({ key: label, label, num: ["RAM", "PMEM"].includes(label) })), memdevRows)
    : emptyState("No CXL memory devices."));
  const regionRows = (topo.regions || []).map((r) => h("tr", {},
    h("td", {}, r.region), h("td", {}, r.type ?? "—"), h("td", { class: "num" }, fmtBytes(r.size)),
    h("td", {}, r.interleave_ways ?? "—"), h("td", {}, r.decode_state ?? "—"),
    h("td", {}, (r.mappings || []).map((m) => m.memdev).join(", ") || "—")));
  if (regionRows.length) {
    out.push(h("h2", {}, "CXL regions"), table(["Region", "Type", "Size", "Interleave ways",
      "Decode state", "Memdevs"].map((label) => ({ key: label, label, num: label === "Size" })), regionRows));
  }
  const nodeRows = (topo.numa_nodes || []).map((n) => h("tr", {},
    h("td", {}, `node${n.node}`), h("td", {}, n.has_cpu ? n.cpulist || "yes" : "CPU-less"),
    h("td", { class: "num" }, fmtBytes(n.mem_total)), h("td", { class: "num" }, fmtBytes(n.mem_free)),
    h("td", {}, n.memory_tier ?? "—")));
  if (nodeRows.length) {
    out.push(h("h2", {}, "NUMA nodes"), table(["Node", "CPUs", "Memory", "Free", "Memory tier"]
      .map((label) => ({ key: label, label, num: ["Memory", "Free"].includes(label) })), nodeRows));
  }
  return out;
}
