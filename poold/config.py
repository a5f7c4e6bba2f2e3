"""The one Settings object: every knob of the daemon, its unit, and why its default.

Sources, strongest first: values given by the CLI, `POOLD_*` environment variables, the TOML config
file (`--config`, else /etc/poold/poold.toml when it exists), the defaults below. Nothing else in
poold reads the environment.
"""

from __future__ import annotations

import os
import socket
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from poold.types import DEFAULT_ALIGN, GiB, parse_size

DEFAULT_CONFIG_FILE = Path("/etc/poold/poold.toml")
# Every request poold understands is well under 4 KiB.
MAX_BODY_BYTES = 65_536
# A request's headers: a bearer token and a few standard headers are well under 1 KiB; browsers
# send a few KiB of cookies at most (nginx's default buffers take 32 KiB).
MAX_HEADER_BYTES = 32_768
# Seconds a client has to send a request's headers once it started (or once it connected).
HEADER_TIMEOUT_S = 10.0
_config_file: ContextVar[Path | None] = ContextVar("poold_config_file", default=None)


def _bytes(value: Any) -> Any:
    """Let sizes be written as "1GiB" in TOML and the environment."""
    return parse_size(value) if isinstance(value, str) else value


Bytes = Annotated[int, BeforeValidator(_bytes)]


def _default_state_dir() -> Path:
    # root runs as the system service (systemd's StateDirectory); anyone else gets a per-user dir.
    if os.geteuid() == 0:
        return Path("/var/lib/poold")
    return Path.home() / ".local" / "state" / "poold"


def _machine_id() -> str:
    try:
        return Path("/etc/machine-id").read_text().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="POOLD_", extra="forbid")

    state_dir: Path = Field(
        default_factory=_default_state_dir,
        description="Directory for the SQLite ledger, the lease-token key, the admin credential "
        "and the fd keeper's socket (mode 0700). One daemon at a time: it holds poold.lock.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the ledger. None: SQLite at <state_dir>/ledger.sqlite3. "
        "Use postgresql+psycopg://... when several hosts share a pool.",
    )
    runtime_dir: Path | None = Field(
        default=None,
        description="Directory of the daemon's UNIX sockets (api.sock: HTTP; fd.sock: device file "
        "descriptors for lease holders). None: state_dir. The system service uses /run/poold "
        "(systemd's RuntimeDirectory).",
    )
    listen: str = Field(
        default="127.0.0.1:7077",
        description="HOST:PORT of the HTTP API. Loopback by default: the API grants memory.",
    )
    host_id: str = Field(
        default_factory=_machine_id,
        description="Identity of this host in the ledger; /etc/machine-id so it survives renames.",
    )
    host_name: str = Field(default_factory=socket.gethostname, description="Display name.")
    emulate_size: Bytes | None = Field(
        default=None,
        description="Bytes of an emulated device to add (machines without CXL): each lease on "
        "it is a sealed memfd of its own.",
    )
    emulate_uid: str | None = Field(
        default=None,
        description="Identity of the emulated device in the ledger. Set: the device is shared, "
        "one ledger device for every host that names this uid (their claims and leases are "
        "arbitrated in the ledger; each lease's memory is its granting daemon's). None: this "
        "daemon's own device, keyed by its state_dir.",
    )
    emulate_huge_pages: bool = Field(
        default=True,
        description="Make an emulated lease's memory of huge pages (hugetlbfs, reserved at "
        "grant) when the default huge page pool has room for it; else shmem.",
    )
    fd_store: Literal["auto", "systemd", "keeper", "none"] = Field(
        default="auto",
        description="Where the memory objects of emulated and system-ram leases outlive the "
        "daemon, so a restart keeps them: systemd's file descriptor store (the unit sets "
        "FileDescriptorStoreMax= and this), a keeper process the daemon starts beside itself, "
        "or none (a restart loses them; their leases are recorded lost). auto: systemd when it "
        "offers a store ($FDSTORE), else the keeper.",
    )
    fd_keeper_linger_s: float = Field(
        default=86_400.0,
        gt=0,
        description="Seconds the keeper holds lease memory with no daemon connected before it "
        "exits: by then every lease it holds has expired (a day: the longest default TTL).",
    )
    shared_devices: list[str] = Field(
        default_factory=list,
        description="Globs on a device's identity (CXL serial based) or name: matching devices "
        "are reachable from several hosts (multi-headed, behind a switch) and registered once, "
        "owned by no host; their capacity is arbitrated between hosts by claims in the ledger.",
    )
    host_ttl_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds this host may go without writing its heartbeat to the ledger before "
        "it fences itself: it grants nothing and tells its clients their leases are lost. Ten "
        "reaper ticks, so a slow commit or two does not fence a healthy host.",
    )
    host_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="Seconds after host_ttl_s (ledger clock) before other hosts declare a silent "
        "host lost and reclaim its capacity. Must cover how long a client of the fenced host "
        "takes to hear its lease is lost: its keepalive period, a third of the longest lease "
        "TTL in use (60 s by default: 20 s), plus a tick.",
    )
    claim_idle_s: float = Field(
        default=30.0,
        ge=0,
        description="Seconds a claim may hold no lease before this host gives it back to the "
        "device. A host short of room takes idle claimed bytes of other hosts at once anyway; "
        "this keeps the claim table small and the capacity view honest.",
    )
    emulate_align: Bytes = Field(
        default=DEFAULT_ALIGN,
        description="Alignment of the emulated device in bytes: 2 MiB, like devdax on x86-64.",
    )
    sysfs_root: Path = Field(
        default=Path("/sys"), description="sysfs to discover CXL and DAX devices in (a recorded "
        "tree for tests and demos)."
    )
    discover_dax: bool = Field(
        default=True, description="Lease the dax devices sysfs shows (devdax mode). Off: only the "
        "emulated device."
    )
    rescan_interval_s: float = Field(
        default=30.0, gt=0, description="Seconds between full rescans; udev events trigger one "
        "sooner, this catches what udev missed."
    )
    watch_udev: bool = Field(
        default=True, description="Follow hotplug through udev (netlink); without it, only the "
        "periodic rescan sees changes."
    )
    default_pool: str = Field(default="default", description="Pool that new devices join. A "
                              "pool this host names (here or in device_pools) that the ledger "
                              "does not have yet is created with the policy settings below; "
                              "after that the ledger's policy wins.")
    device_pools: dict[str, str] = Field(
        default_factory=dict,
        description="Placement rules, first match wins: a glob on the device's name or identity "
        '-> pool name, e.g. {"dax*" = "cxl", "emu*" = "default"}. Unmatched devices join '
        "default_pool. Applies when a device first appears. Bootstrap value: the first host to "
        "start with rules writes them to the ledger, whose rules win after that (`poold pool "
        "rules`).",
    )
    default_ttl_s: int = Field(
        default=60, gt=0, description="Seconds a lease lives without keepalive when none is asked."
        " Bootstrap value: seeds a new pool; after that the ledger's policy wins (`poold pool "
        "set`)."
    )
    max_ttl_s: int = Field(
        default=86_400, gt=0, description="Longest TTL a client may ask for, in seconds (a "
        "day). Bootstrap value: seeds a new pool; after that the ledger's policy wins (`poold "
        "pool set`)."
    )
    claim_slice: Bytes = Field(
        default=GiB,
        ge=0,
        description="Bytes a host claims from a device at a time; 0 claims whole devices. Coarse "
        "so claims stay rare, fine enough that hosts sharing a device do not strand it. Bootstrap "
        "value: seeds a new pool; after that the ledger's policy wins (`poold pool set`).",
    )
    reap_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="Seconds between reaper passes; an expired lease is finalised within one.",
    )
    reclaim_grace_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="Seconds a holder asked to give an elastic lease back (a grant is waiting "
        "for room) has before the lease is revoked. Long enough for a KV store to drop its "
        "blocks and release (milliseconds) on a loaded host, short enough that a waiting grant "
        "(wait_s, at most 60 s) is not refused for a holder that ignores the ask.",
    )
    unscrubbed_pools: list[str] = Field(
        default_factory=list,
        description="Pools whose released extents are granted again without being zeroed first. "
        "Every other pool scrubs on release: a lease's bytes are zeroed (the lease shows "
        "`scrubbing` meanwhile) before anyone else can be granted them. Only for a pool that one "
        "tenant uses alone, to save the zeroing. Bootstrap value: seeds a new pool; after that the "
        "ledger's policy wins (`poold pool set --no-scrub`).",
    )
    trusted_pools: list[str] = Field(
        default_factory=list,
        description="Pools whose tenants trust each other with their bytes: a devdax device "
        "there that is not carved per lease (a static namespace, a region carved by hand) "
        "serves every tenant's leases at once, each holder handed the whole device. In every "
        "other pool such a device serves one tenant at a time (its first lease's, until an "
        "admin frees it: `poold device unbind-tenant`). Bootstrap value: seeds a new pool; after "
        "that the ledger's policy wins (`poold pool set --trusted`).",
    )
    manual_regions: list[str] = Field(
        default_factory=list,
        description="Globs on dynamic dax regions' names (daxN) that an admin carves by hand "
        '(`poold device create` ...), e.g. ["dax1"]: their devices are leased as they are. Every '
        "other dynamic region is carved per lease: each lease gets a dax device of its own, "
        "destroyed when it ends, so its holder reaches its lease and nothing else.",
    )
    sqlite_synchronous: str = Field(
        default="FULL",
        pattern="^(FULL|NORMAL)$",
        description="FULL fsyncs every commit so an acknowledged grant survives power loss; group "
        "commit makes that cheap. NORMAL survives process crashes only.",
    )
    commit_batch_max: int = Field(
        default=256,
        gt=0,
        description="Most ledger commands folded into one transaction by the writer.",
    )
    log_level: str = Field(default="INFO", description="Python logging level name.")
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="text: one line per record, for people and journalctl. json: one JSON object "
        "per line (time, level, logger, message and the record's key=value context), for log "
        "shippers.",
    )
    auth: Literal["token", "off"] = Field(
        default="token",
        description="token: every API request names a principal, by bearer token or (on the UNIX "
        "socket) by its uid through peer_admins / peer_tenants; an admin credential is written "
        "to <state_dir>/admin.token (0600) on first start. off: everyone is an admin (a "
        "single-user machine only). /healthz, /readyz and /metrics never ask.",
    )
    peer_admins: list[str] = Field(
        default_factory=lambda: ["root"],
        description="Users (names or uids) that are admins on the UNIX socket without a token. "
        "The daemon's own user always is: it can read the admin credential anyway.",
    )
    peer_tenants: dict[str, str] = Field(
        default_factory=dict,
        description="Users (names or uids) on the UNIX socket -> the tenant they act as without a "
        'token, e.g. {"vllm" = "team-a", "1001" = "team-b"}.',
    )
    tls_certfile: Path | None = Field(
        default=None,
        description="PEM certificate (chain) for HTTPS on the TCP listener; with tls_keyfile. "
        "The UNIX socket stays plain: its peers are identified by the kernel.",
    )
    tls_keyfile: Path | None = Field(default=None, description="PEM private key for tls_certfile.")
    max_body_bytes: int = Field(
        default=MAX_BODY_BYTES,
        gt=0,
        description="Largest request body accepted; a larger one is refused (413) before it is "
        "read. Every request poold understands is well under 4 KiB.",
    )
    retention_s: float = Field(
        default=7 * 86_400.0,
        gt=0,
        description="Seconds the ledger keeps what has ended: this host's ended leases (with "
        "their events and idempotency keys), renewals, released claims and events that name no "
        "lease are pruned once older, in bounded batches (a week: the audit log's reach).",
    )
    capacity_sample_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds between samples of each pool's capacity, kept in memory for an "
        "hour: the trend the admin UI's overview draws.",
    )
    prune_interval_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds between retention passes; each deletes at most a thousand rows of "
        "each kind per transaction until nothing older is left.",
    )
    default_tenant_max_bytes: Bytes | None = Field(
        default=None,
        ge=0,
        description="Byte quota of a tenant created without one (by its first token, or by a "
        "grant naming it); None: unlimited. `poold tenant set` overrides it per tenant.",
    )
    default_tenant_max_leases: int | None = Field(
        default=256,
        ge=0,
        description="Live-lease quota of a tenant created without one; None: unlimited. Once, a "
        "new tenant took every lease a device could hold.",
    )
    rate_limit_per_s: float | None = Field(
        default=200.0,
        gt=0,
        description="Requests a second each tenant or agent principal may make (a token bucket "
        "holding rate_limit_burst); past it, 429 RateLimited with Retry-After. Admins are not "
        "limited. None: no limit.",
    )
    rate_limit_burst: int = Field(
        default=400,
        gt=0,
        description="Requests a principal may make at once before rate_limit_per_s applies.",
    )
    max_header_bytes: int = Field(
        default=MAX_HEADER_BYTES,
        gt=1024,
        description="Largest request header block accepted, in bytes (TCP and api.sock); past it "
        "the request is answered 431 and the connection closed before anything is buffered "
        "further. A token and the usual headers are well under 1 KiB.",
    )
    header_timeout_s: float = Field(
        default=HEADER_TIMEOUT_S,
        gt=0,
        description="Seconds a client has to send a request's headers, from its first byte (or "
        "from connecting); then 408 and the connection is closed, so slow clients cannot hold "
        "connections open.",
    )
    max_connections: int = Field(
        default=1024,
        gt=0,
        description="Connections (and requests in progress) served at once on each of TCP and "
        "api.sock; past it new requests are answered 503. Well under the unit's LimitNOFILE.",
    )
    probe_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="Seconds /readyz and the systemd watchdog wait for the ledger to answer a read "
        "and a no-op write before calling it unavailable: well under the watchdog's 15 s ping "
        "period, well over a commit under load.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = _config_file.get()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)

    @model_validator(mode="before")
    @classmethod
    def _no_isolated_pools(cls, data: Any) -> Any:
        if isinstance(data, dict) and "isolated_pools" in data:
            raise ValueError("isolated_pools is gone: every dynamic dax region is now carved per "
                             "lease by default (each lease a dax device of its own); place a "
                             'region in a pool with device_pools, e.g. {"dax0" = "private"}')
        return data

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together: set both or neither")
        return self

    @property
    def sockets_dir(self) -> Path:
        return self.runtime_dir if self.runtime_dir is not None else self.state_dir

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite ledger's file, when the ledger is the default one in state_dir."""
        return None if self.database_url else self.state_dir / "ledger.sqlite3"

    @property
    def ledger_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.sqlite_path}"

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0] or "127.0.0.1"

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from CLI overrides (None values ignored), environment and config file."""
    if config_file is None and DEFAULT_CONFIG_FILE.is_file():
        config_file = DEFAULT_CONFIG_FILE
    if config_file is not None and not config_file.is_file():
        raise FileNotFoundError(f"config file {config_file} does not exist")
    token = _config_file.set(config_file)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    finally:
        _config_file.reset(token)
