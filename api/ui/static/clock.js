// The ledger's clock as this page sees it: the browser's, corrected by the daemon's Date headers.

// The ledger's clock judges expiry; the browser's may be off. Every answer's Date header says
// roughly (1 s resolution) how far.
let skewMs = 0;
export const now = () => Date.now() + skewMs;

// Each answer's Date header (ms since the epoch; NaN when absent) moves the clock when it is off.
export function noteServerDate(date) {
  if (!Number.isNaN(date) && Math.abs(date - Date.now() - skewMs) > 1500) skewMs = date - Date.now();
}
