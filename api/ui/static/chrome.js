// The page's chrome: toasts, the banner, the confirmation dialog and the tooltip.
import { $, h } from "./dom.js";

export function toast(message, kind = "info") {
  const el = h("div", { class: `toast ${kind}`, role: kind === "error" ? "alert" : "status", text: message });
  $("#toasts").append(el);
  setTimeout(() => el.remove(), kind === "error" ? 8000 : 4000);
}

export function banner(message, kind = "error") {
  const el = $("#banner");
  el.hidden = !message;
  el.className = `banner ${kind}`;
  el.textContent = message || "";
}

// A modal confirmation. With `field` (a placeholder), it also asks for a size: resolves to the
// typed text, or null when cancelled; without, to true or false.
export function confirmDialog(title, body, okText, field = null) {
  const dialog = $("#confirm");
  $("#confirm-title").textContent = title;
  $("#confirm-body").textContent = body;
  $("#confirm-ok").textContent = okText;
  $("#confirm-field").hidden = !field;
  const input = $("#confirm-input");
  input.value = "";
  input.placeholder = field || "";
  dialog.returnValue = "";
  dialog.showModal();
  if (field) input.focus();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const ok = dialog.returnValue === "ok";
      resolve(field ? (ok ? input.value.trim() : null) : ok);
    }, { once: true });
  });
}

export function showTooltip(event, lines) {
  const tip = $("#tooltip");
  tip.replaceChildren(...lines.map((line) => h("div", { text: line })));
  tip.hidden = false;
  const x = Math.min(event.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
  const y = event.clientY + 16 + tip.offsetHeight > window.innerHeight
    ? event.clientY - tip.offsetHeight - 10 : event.clientY + 16;
  tip.style.left = `${x}px`;
  tip.style.top = `${y}px`;
}

export const hideTooltip = () => { $("#tooltip").hidden = true; };
