// The ledger's clock as this page sees it: the browser's, corrected by the daemon's Date headers.

// The ledger's clock judges expiry; the browser's may be off. Every answer's Date header says
// roughly how far: the daemon wrote it (truncated to the second) between the moment the request
// left and the moment the answer arrived, so the skew lies in
// [date - receivedAt, date + 1 s - sentAt]. The estimate moves only when it falls outside that
// range: a slow answer (a loaded machine, a busy daemon) widens the range, never misleads it.
let skewMs = 0;
export const now = () => Date.now() + skewMs;

// `date`: the answer's Date header in ms since the epoch (NaN when absent); `sentAt` and
// `receivedAt`: Date.now() when the request left and when its answer arrived.
export function noteServerDate(date, sentAt, receivedAt) {
  if (Number.isNaN(date)) return;
  const low = date - receivedAt;
  const high = date + 1000 - sentAt;
  if (skewMs < low) skewMs = low;
  else if (skewMs > high) skewMs = high;
}
