// The pools page's placement rules: where a device goes when it first appears. Shown in order
// (first match wins), with what this host's config says where it differs; replaced as a whole,
// after a confirmation, from a text of one rule per line.
import { api } from "./api.js";
import { confirmDialog, toast } from "./chrome.js";
import { h } from "./dom.js";
import { showForm } from "./forms.js";
import { emptyState, table } from "./widgets.js";

const RULE_FIELDS = ["device", "name", "identity", "numa_node", "serial"];
const ruleText = (r) => `${r.field} ${r.pattern} ${r.pool}`;

export function drawRules(st, { rules, config_rules: config }) {
  const cols = ["#", "Matches", "Glob", "Pool"].map((label) => ({ key: label, label }));
  const differ = JSON.stringify(rules) !== JSON.stringify(config) && config.length;
  st.rules.replaceChildren(
    h("p", { class: "muted" }, "Where a device goes when it first appears (or comes back, unless put somewhere by hand): the first rule that matches wins, else its daemon's default pool. Devices already placed stay; move them to change that."),
    rules.length
      ? table(cols, rules.map((r, i) => h("tr", { "data-rule": i }, h("td", {}, String(i + 1)), h("td", {}, r.field),
        h("td", { class: "mono" }, r.pattern), h("td", {}, r.pool))))
      : emptyState("No rules: every new device joins its daemon's default pool."),
    differ ? h("p", { class: "warn-text", id: "rules-disagree" }, `This host's config (device_pools) says otherwise: ${config.map(ruleText).join("; ")}. The ledger's rules win.`) : null);
}

export function editRules(st) {
  const text = h("textarea", { name: "rules", rows: 6, cols: 60, class: "mono", placeholder: "name dax1.* cxl\nserial 0x4a* gpu-kv" });
  text.value = (st.ruleList || []).map(ruleText).join("\n");
  showForm(st.editor, "Placement rules, one per line: what it matches (device, name, identity, numa_node or serial), a glob, a pool", [h("label", {}, "Rules", text)], async (data) => {
    const rules = String(data.get("rules")).split("\n").map((l) => l.trim()).filter(Boolean).map((line, i) => {
      const parts = line.split(/\s+/);
      if (parts.length !== 3 || !RULE_FIELDS.includes(parts[0])) throw new Error(`line ${i + 1}: write "field glob pool", field one of ${RULE_FIELDS.join(", ")}`);
      return { field: parts[0], pattern: parts[1], pool: parts[2] };
    });
    if (!await confirmDialog("Replace the placement rules?", rules.length ? rules.map((r, i) => `${i + 1}. ${ruleText(r)}`).join("; ") : "No rules: every new device joins its daemon's default pool.", "Replace")) return false;
    await api("/v1/pool-rules", { method: "PUT", body: { rules } });
    toast("Placement rules replaced.");
    return true;
  });
}
