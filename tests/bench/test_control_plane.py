"""bench/control_plane.py's machine-cost table, from points whose arithmetic is known: a
request's cost to the machine is the server's CPU and its client's, the ceiling is the rate
at which that fills every CPU, and etcd's rate sets the server CPU a request may cost."""

from __future__ import annotations

from bench import control_plane

ETCD = control_plane.ETCD


def test_the_ceiling_and_the_cpu_needed_for_etcd_s_rate() -> None:
    rows: control_plane.Rounds = {
        # requests/s, p99 ms, server CPU ms/req, clients' CPU ms/req; two rounds (medians)
        "poold": [{1: (500, 4, 1.2, 0.2), 16: (1000, 20, 0.6, 0.4)},
                  {1: (700, 4, 1.0, 0.2), 16: (1400, 20, 0.8, 0.4)}],
        ETCD: [{1: (1000, 3, 0.8, 0.2), 16: (2500, 11, 0.3, 0.3)},
               {1: (1000, 3, 0.8, 0.2), 16: (2500, 11, 0.3, 0.3)}],
    }
    header, _, poold, etcd = control_plane.budget_table(rows, [1, 16], ETCD, cpus=2)
    assert header.count("for etcd's rate") == 1  # one client: latency-bound, not CPU-bound
    # 16 clients: 0.7 + 0.4 ms a request on 2 CPUs fills them at 1818/s, 1200/s is 66% of it;
    # etcd's 2500/s leaves 2000/2500 - 0.4 = 0.40 ms of server CPU a request.
    assert poold.split(" | ")[1:] == ["1.10 + 0.20; 1538 (39%)", "0.70 + 0.40; 1818 (66%)",
                                      "0.40 |"]
    assert etcd.split(" | ")[2:] == ["0.30 + 0.30; 3333 (75%)", "0.50 |"]
