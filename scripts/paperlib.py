"""Helpers shared by the paper scripts (scripts/int-paper, scripts/p4te-paper):
a real-time fabric with `weft up` in the background, commands inside its
hosts' network namespaces, `weft status` and /metrics scrapes, and small
SVG plots (no plotting package needed)."""
import contextlib
import math
import os
import re
import subprocess
import urllib.request

COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759"]


@contextlib.contextmanager
def real_fabric(weft, topo, scheme, seed, prefix, extra=()):
    """`weft up TOPO --scheme SCHEME` in the background for the block (hosts
    in namespaces named PREFIX+host), `weft down` after it (also on an
    error)."""
    cmd = [weft, "up", topo, "--scheme", scheme, "--detach", "--netns-prefix", prefix,
           "--seed", str(seed), "--metrics", "127.0.0.1:0", *extra]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    try:
        yield
    finally:
        subprocess.run([weft, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ns(prefix, host):
    """The command prefix that runs a command inside `host`'s namespace."""
    return ["ip", "netns", "exec", prefix + host]


def host_ip(prefix, host):
    out = subprocess.run(ns(prefix, host) + ["ip", "-4", "-o", "addr", "show", "dev", "eth0"], check=True,
                         capture_output=True, text=True).stdout
    return re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out).group(1)


def fabric_status(weft, prefix, save=None):
    """(metrics URL, {host: NIC-queue drops}) from `weft status`; with
    `save`, also writes the status and a /metrics scrape there."""
    out = subprocess.run([weft, "status"], check=True, capture_output=True, text=True).stdout
    url = re.search(r"metrics: (http://\S+/metrics)", out)
    drops = {m.group(1)[len(prefix):]: int(m.group(2))
             for m in re.finditer(r"(\S+)\s+TAP host: \d+ frames sent into the fabric, (\d+) NIC-queue drops", out)}
    if save:
        open(os.path.join(save, "status.txt"), "w").write(out)
        if url:
            open(os.path.join(save, "metrics.txt"), "w").write(urllib.request.urlopen(url.group(1), timeout=5).read().decode())
    return (url.group(1) if url else None), drops


def metric_sum(text, family):
    """Sum of a counter family over all its series in a /metrics text."""
    return int(sum(float(m.group(1)) for m in re.finditer(r"^%s\{[^}]*\} (\S+)$" % re.escape(family), text, re.M)))


def uplink_counters(text, leaf, family="weft_port_tx_bytes_total"):
    """{spine: value} of `family` on `leaf`'s uplinks in a /metrics text."""
    out = {}
    for m in re.finditer(r'^%s\{switch="%s",port="\d+",link="%s-(spine\d+)"\} (\S+)$' % (family, leaf, leaf), text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def scrape(url):
    return urllib.request.urlopen(url, timeout=5).read().decode()


def nice_ticks(top):
    """Tick values from 0 to at most `top`, 3 to 6 of them, in steps of
    1, 2, 2.5 or 5 times a power of ten."""
    if not top > 0:
        return [0]
    raw = top / 4
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * 0.999)
    return [i * step for i in range(int(top / step + 1e-9) + 1)]


def tick_label(v):
    """A tick in plain digits: 0.25, 2, 8 000 (a thin space groups thousands)."""
    if v >= 1000:
        return f"{v:,.0f}".replace(",", "\u2009")
    return f"{v:.10g}"


def y_axis(out, left, right, base, plot_h, top):
    """Grid lines and labels of a linear y axis from 0 to `top` (at `base`,
    `plot_h` pixels tall), at nice values."""
    for v in nice_ticks(top):
        y = base - plot_h * v / top
        out.append(f'<text x="{left - 5}" y="{y + 4:.1f}" text-anchor="end">{tick_label(v)}</text>')
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#ddd"/>')


def frame(w, h, left, bottom, title, ylabel, top):
    """An SVG plot frame: title, axes, y label, 4 grid lines up to `top`."""
    plot_h = h - bottom - 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - 20}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{left}" y2="40" stroke="black"/>',
           f'<text x="15" y="{40 + plot_h / 2}" transform="rotate(-90 15 {40 + plot_h / 2})" text-anchor="middle">{ylabel}</text>']
    y_axis(out, left, w - 20, h - bottom, plot_h, top)
    return out, plot_h


def legend(out, names, left, h, width=110):
    for i, n in enumerate(names):
        out.append(f'<rect x="{left + 10 + i * width}" y="{h - 18}" width="12" height="12" fill="{COLOURS[i % 4]}"/>')
        out.append(f'<text x="{left + 26 + i * width}" y="{h - 8}">{n}</text>')
