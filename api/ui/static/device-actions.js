// Device actions: drain, undrain, reconfigure, resize, destroy and create, each confirmed first.
import { api } from "./api.js";
import { confirmDialog, toast } from "./chrome.js";
import { baseName, fmtBytes, parseBytes } from "./format.js";
import { tickNow } from "./poll.js";

// Device operations (api.routers.devices) address dax devices by name; the emulated device has
// none of them.
export const DAX_NAME = /^dax\d+\.\d+$/;

async function deviceOp(devname, operation, body) {
  const path = operation === "destroy" ? `/v1/devices/${devname}`
    : operation === "create" ? "/v1/devices" : `/v1/devices/${devname}/${operation}`;
  const method = operation === "destroy" ? "DELETE" : "POST";
  try {
    const done = await api(path, { method, body });
    toast(`${done.devname}: ${operation} done.`);
  } catch (exc) {
    if (exc.status === 401) return;
    toast(exc.missingEndpoint
      ? `This daemon cannot ${operation} devices yet (${exc.where} answered ${exc.status}).`
      : `${operation} ${devname || ""} refused: ${exc.message}`, "error");
  }
  tickNow();
}

export async function drainAction(device, verb) {
  const text = verb === "drain"
    ? `No new leases will be placed on ${device.devname}; its ${device.live_leases} live lease(s) run until released, expired or revoked.`
    : `${device.devname} will take new leases again.`;
  if (await confirmDialog(`${verb === "drain" ? "Drain" : "Undrain"} ${device.devname}?`, text,
    verb === "drain" ? "Drain" : "Undrain")) await deviceOp(device.devname, verb);
}

export async function reconfigureAction(d) {
  const devname = baseName(d.chardev);
  const mode = d.mode === "system-ram" ? "devdax" : "system-ram";
  const text = mode === "system-ram"
    ? `${devname} goes to the kernel as a CPU-less NUMA node (kmem); poold stops leasing it. Refused while it holds live leases.`
    : `${devname} leaves the page allocator and becomes a leasable devdax device. Refused while its memory is in use.`;
  if (await confirmDialog(`Reconfigure ${devname} as ${mode}?`, text, "Reconfigure")) {
    await deviceOp(devname, "reconfigure", { mode });
  }
}

export async function resizeAction(d) {
  const devname = baseName(d.chardev);
  const text = await confirmDialog(`Resize ${devname}`, `Now ${fmtBytes(d.size)}; a multiple of `
    + `${fmtBytes(d.align)}. Refused while it holds live leases.`, "Resize", "e.g. 1GiB, 0 to empty");
  if (text === null) return;
  const size = parseBytes(text);
  if (Number.isNaN(size)) { toast(`Not a size: ${text}`, "error"); return; }
  await deviceOp(devname, "resize", { size });
}

export async function destroyAction(d) {
  const devname = baseName(d.chardev);
  if (await confirmDialog(`Destroy ${devname}?`, `${fmtBytes(d.size)} go back to dax region `
    + `${d.region_id}. Refused while it holds live leases.`, "Destroy")) await deviceOp(devname, "destroy");
}

export async function createAction(region) {
  const text = await confirmDialog(`New device in dax region ${region.id}`,
    `${fmtBytes(region.available_size)} available; a multiple of ${fmtBytes(region.align)}.`,
    "Create", "e.g. 1GiB");
  if (text === null) return;
  const size = parseBytes(text);
  if (Number.isNaN(size)) { toast(`Not a size: ${text}`, "error"); return; }
  await deviceOp("", "create", { region: region.id, size });
}
