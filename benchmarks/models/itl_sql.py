"""A stored run's ITL percentiles computed by the database, in bounded memory.

A run of 1,000,000 requests streaming 300 tokens each has 300 million gaps: too many to
hold in Python, so the database unnests RequestResult.itl_s (SQLite json_each, PostgreSQL
jsonb_array_elements_text), sorts (spilling to disk as it must) and returns the two values
at the nearest ranks, metrics.rank_index, the same rule summarize() applies in memory.
"""

from __future__ import annotations

from django.db import connection

from ..records.metrics import rank_index


def itl_percentiles(
    request_table: str, run_id: int, percentiles: tuple[int, ...] = (50, 95)
) -> dict[int, float | None]:
    """Nearest-rank percentiles of every inter-token gap of the run's ok requests (two queries).

    request_table: RequestResult's, handed in by the model, which imports this module.
    """
    table = connection.ops.quote_name(request_table)
    if connection.vendor == "postgresql":
        length, unnest, value = "jsonb_array_length", "jsonb_array_elements_text", "j.value::float8"
    else:
        length, unnest, value = "json_array_length", "json_each", "j.value"
    where = f"r.run_id = %s AND r.ok AND r.itl_s IS NOT NULL AND {length}(r.itl_s) > 0"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT SUM({length}(r.itl_s)) FROM {table} r WHERE {where}", [run_id])
        n = int(cursor.fetchone()[0] or 0)
        if n == 0:
            return dict.fromkeys(percentiles)
        ranks = {p: rank_index(p, n) + 1 for p in percentiles}
        wanted = sorted(set(ranks.values()))
        cursor.execute(
            f"SELECT rn, v FROM (SELECT {value} AS v, ROW_NUMBER() OVER (ORDER BY {value}) AS rn "
            f"FROM {table} r, {unnest}(r.itl_s) j WHERE {where}) ranked "
            f"WHERE rn IN ({', '.join(['%s'] * len(wanted))})",
            [run_id, *wanted],
        )
        at = {int(rn): float(v) for rn, v in cursor.fetchall()}
    return {p: at.get(rank) for p, rank in ranks.items()}
