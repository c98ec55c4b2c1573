#!/usr/bin/env python3
"""Plots the estimated end-to-end latency of `tune --model --json` runs against the
trials spent, one line per run, as an SVG (no dependencies): the scheduler ablation
(gradient vs round-robin with the same budget) of docs/models.md.

  plot_model_tuning.py OUT.svg LABEL=RUN.jsonl [LABEL=RUN.jsonl ...]
"""
import json
import sys

W, H, L, R, T, B = 720, 420, 70, 170, 30, 50
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def points(path):
    out = []
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "round" and e.get("estimated_seconds") is not None:
                out.append((e["spent"], e["estimated_seconds"] * 1e3))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs = []
    for arg in sys.argv[2:]:
        label, _, path = arg.partition("=")
        runs.append((label, points(path)))
    xs = [x for _, p in runs for x, _ in p]
    ys = [y for _, p in runs for _, y in p]
    if not xs:
        sys.exit("no round with an estimate in the runs")
    x0, x1 = 0, max(xs)
    y0, y1 = min(ys) * 0.95, max(ys) * 1.02
    sx = lambda x: L + (x - x0) / max(1e-9, x1 - x0) * (W - L - R)
    sy = lambda y: H - B - (y - y0) / max(1e-9, y1 - y0) * (H - T - B)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">trials spent</text>',
           f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" '
           f'text-anchor="middle">estimated end-to-end ms</text>']
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        y = y0 + (y1 - y0) * i / 5
        svg.append(f'<text x="{sx(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x:.0f}</text>')
        svg.append(f'<text x="{L - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.3g}</text>')
        svg.append(f'<line x1="{L}" y1="{sy(y):.1f}" x2="{W - R}" y2="{sy(y):.1f}" stroke="#eee"/>')
    for k, (label, p) in enumerate(runs):
        c = COLORS[k % len(COLORS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in p)
        svg.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{path}"/>')
        final = f"{p[-1][1]:.3g} ms" if p else "-"
        svg.append(f'<text x="{W - R + 10}" y="{T + 20 + 18 * k}" fill="{c}">{label}: {final}</text>')
    svg.append("</svg>")
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
