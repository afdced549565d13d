"""The chart: ours against the peer per metric, as an SVG of bars on a log scale."""


def chart_svg(rows, rounds):
    """Horizontal bars: ours vs peer (x better), log scale, with each target marked."""
    import math

    targets = {"peak RSS": 3, "throughput": 3}
    bars = [(metric, r, f"{r:.1f}x ({o} vs {p})") for metric, o, p, r, _, _ in rows]
    width, left, right, top, bar_h, gap = 960, 330, 40, 60, 26, 14
    height = top + len(bars) * (bar_h + gap) + 50
    lo = 0.1 if min(r for _, r, _ in bars) < 0.9 else 0.5
    hi = max(300.0, max(r for _, r, _ in bars) * 4)
    span = math.log10(hi) - math.log10(lo)
    x = lambda v: left + (width - left - right) * (math.log10(max(v, lo)) - math.log10(lo)) / span
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="13">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="16" font-weight="bold">'
        f"payments-consumer (Rust) vs the Powertools pattern (Python), median of {rounds} round{'s' if rounds > 1 else ''}</text>",
        f'<text x="{width / 2}" y="44" text-anchor="middle" fill="#555">how many times better ours is '
        "(ours vs peer), log scale; 1x = equal; dashed: the issue's target</text>",
    ]
    for tick in (0.1, 0.3, 0.5, 1, 3, 10, 30, 100, 300, 1000):
        if tick > hi or tick < lo:
            continue
        tx = x(tick)
        out.append(f'<line x1="{tx:.1f}" y1="{top - 6}" x2="{tx:.1f}" y2="{height - 40}" stroke="#ddd"/>')
        out.append(f'<text x="{tx:.1f}" y="{height - 24}" text-anchor="middle" fill="#555">{tick:g}x</text>')
    out.append(f'<line x1="{x(1):.1f}" y1="{top - 6}" x2="{x(1):.1f}" y2="{height - 40}" stroke="#333"/>')
    for k, (metric, r, label) in enumerate(bars):
        y = top + k * (bar_h + gap)
        x0, x1 = x(1), x(r)
        color = "#2b8a3e" if r > 1.0 else ("#868e96" if r == 1.0 else "#c92a2a")
        out.append(f'<text x="{left - 8}" y="{y + bar_h * 0.7:.1f}" text-anchor="end">{esc(metric)}</text>')
        out.append(
            f'<rect x="{min(x0, x1):.1f}" y="{y}" width="{max(abs(x1 - x0), 2):.1f}" height="{bar_h}" fill="{color}"/>'
        )
        out.append(f'<text x="{max(x0, x1) + 6:.1f}" y="{y + bar_h * 0.7:.1f}">{esc(label)}</text>')
        for needle, target in targets.items():
            if needle in metric:
                tx = x(target)
                out.append(
                    f'<line x1="{tx:.1f}" y1="{y - 3}" x2="{tx:.1f}" y2="{y + bar_h + 3}" stroke="black" '
                    'stroke-width="2" stroke-dasharray="4,3"/>'
                )
    out.append("</svg>")
    return "\n".join(out) + "\n"
