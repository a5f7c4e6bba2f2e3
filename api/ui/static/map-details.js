// The memory map's lease details: the lines of a lease's tooltip and the selected lease's panel.
import { h } from "./dom.js";
import { fmtBytes, fmtDuration, fmtExpiry, fmtTime, labelsText, secondsSince } from "./format.js";
import { hostName } from "./hostnames.js";
import { stateBadge } from "./widgets.js";

export function leaseLines(l) {
  return [`Lease ${l.id}`, `holder: tenant ${l.tenant ?? "(none)"} on host ${hostName(l.host)}`,
    `size ${fmtBytes(l.length)} at offset ${fmtBytes(l.offset)}`,
    `age ${fmtDuration(secondsSince(l.granted_at))}, expires ${fmtExpiry(l)}`,
    `generation ${l.generation}`, labelsText(l.labels) ? `labels ${labelsText(l.labels)}` : null,
    l.elastic ? (l.reclaim_by ? `elastic: asked back, revoked at ${fmtTime(l.reclaim_by)} unless given back`
      : "elastic: given back when a grant waits for room") : null,
  ].filter(Boolean);
}

export function drawDetails(st) {
  if (!st.details) return;
  const l = st.selected && st.leases ? st.leases.get(st.selected) : null;
  if (!l) {
    st.details.replaceChildren(h("div", { class: "muted" },
      st.selected ? "The selected lease has ended." : "Hover over an extent for a summary; click a lease for its details."));
    return;
  }
  const row = (k, v) => [h("dt", {}, k), h("dd", {}, v)];
  st.details.replaceChildren(h("h3", {}, "Lease"), h("dl", {},
    row("id", h("code", {}, l.id)), row("tenant", l.tenant ?? "(none)"), row("host", `${hostName(l.host)} (${l.host})`),
    row("state", stateBadge(l.state)), row("size", fmtBytes(l.length)),
    row("offset", `${fmtBytes(l.offset)} (${l.offset})`), row("generation", String(l.generation)),
    row("age", fmtDuration(secondsSince(l.granted_at))), row("expires", fmtExpiry(l)),
    row("ttl", `${l.ttl_s} s`), row("labels", labelsText(l.labels) || "—"),
    row("elastic", !l.elastic ? "no" : l.reclaim_by ? `asked back: give back by ${fmtTime(l.reclaim_by)}` : "yes")));
}
