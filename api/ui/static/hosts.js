// The hosts page: every registered host, its heartbeat, claims, leases and measured memory.
import { api } from "./api.js";
import { h } from "./dom.js";
import { ago, fmtBytes, fmtDuration, fmtTime, shortId } from "./format.js";
import { emptyState, stateBadge, table } from "./widgets.js";

export const hostsPage = {
  title: "Hosts",
  mount(root) {
    const st = { body: h("div", { id: "hosts" }, emptyState("Loading…")) };
    root.append(h("h1", {}, "Hosts"), st.body);
    return st;
  },
  async refresh(st) {
    const hosts = await api("/v1/hosts");
    if (!hosts.length) {
      st.body.replaceChildren(emptyState("No hosts have registered."));
      return;
    }
    const cols = ["Host", "State", "Heartbeat", "Registered", "Claims", "Claimed", "Leases",
      "Leased", "Memory used", "Available", "Swap used", "NUMA nodes"].map((label) => ({
      key: label, label,
      num: ["Claims", "Claimed", "Leases", "Leased", "Memory used", "Available", "Swap used"].includes(label),
    }));
    const rows = hosts.map((x) => {
      const m = x.memory;
      const age = h("td", { class: x.heartbeat_age_s > 15 ? "state-late" : "" }, `${fmtDuration(x.heartbeat_age_s)} ago`);
      if (x.heartbeat_age_s > 15) age.style.color = "var(--warn)";
      return h("tr", { "data-host": x.id },
        h("td", { title: x.id }, h("b", {}, x.name), h("div", { class: "muted mono" }, shortId(x.id))),
        h("td", {}, stateBadge(x.state)), age,
        h("td", { title: fmtTime(x.registered_at) }, ago(x.registered_at)),
        h("td", { class: "num" }, String(x.claims)), h("td", { class: "num" }, fmtBytes(x.claimed_bytes)),
        h("td", { class: "num" }, String(x.live_leases)), h("td", { class: "num" }, fmtBytes(x.leased_bytes)),
        h("td", { class: "num" }, m ? `${fmtBytes(m.used)} of ${fmtBytes(m.total)}` : "—"),
        h("td", { class: "num" }, m ? fmtBytes(m.available) : "—"),
        h("td", { class: "num" }, m ? `${fmtBytes(m.swap_used)} of ${fmtBytes(m.swap_total)}` : "—"),
        h("td", { class: "wrap" }, x.numa_nodes
          ? x.numa_nodes.map((n) => h("div", {}, `node${n.node}: ${fmtBytes(n.mem_free)} free of `
            + `${fmtBytes(n.mem_total)}${n.has_cpu ? "" : " (CPU-less)"}`))
          : h("span", { class: "muted", title: "Only the host serving this page measures its memory" }, "not this host")));
    });
    st.body.replaceChildren(table(cols, rows),
      h("p", { class: "muted" }, "Memory figures are measured by the host that serves this page; other hosts show their ledger figures only."));
  },
};
