from django import template

register = template.Library()


@register.filter
def exact_bytes(value: int | None) -> str:
    """12,345,678 B (11.77 MiB): exact bytes with MiB beside them, or KiB below a MiB (163,840 B (160.00 KiB),
    not "0.16 MiB", which reads as 160 KB), nothing more below a KiB."""
    if value is None:
        return "—"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value < 1024:
        return f"{sign}{value:,} B"
    if value < 1048576:
        return f"{sign}{value:,} B ({sign}{value / 1024:,.2f} KiB)"
    return f"{sign}{value:,} B ({sign}{value / 1048576:,.2f} MiB)"


@register.filter
def mib(value: int | None) -> str:
    """13,302.25 MiB: bytes as MiB for a table cell ("—" when unknown)."""
    if value is None:
        return "—"
    return f"{value / 1048576:,.2f} MiB"
