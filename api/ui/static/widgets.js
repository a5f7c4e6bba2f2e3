// Pieces every page draws with: the state badge, the empty state and the table.
import { h } from "./dom.js";

export const stateBadge = (state) => h("span", { class: `state ${state}`, text: state });

export function emptyState(text) { return h("div", { class: "empty", text }); }

export function table(columns, rows, sort) {
  // columns: [{key, label, num, sortable}]; rows: <tr> nodes; sort: {key, dir, onSort}.
  const head = columns.map((c) => {
    const classes = [c.num ? "num" : "", c.sortable && sort ? "sortable" : ""];
    if (sort && sort.key === c.key) classes.push(sort.dir > 0 ? "sorted-asc" : "sorted-desc");
    return h("th", {
      class: classes.join(" ").trim() || null, "data-key": c.key, title: c.title,
      onclick: c.sortable && sort ? () => sort.onSort(c.key) : null,
    }, c.label);
  });
  return h("div", { class: "table-wrap" },
    h("table", {}, h("thead", {}, h("tr", {}, head)), h("tbody", {}, rows)));
}
