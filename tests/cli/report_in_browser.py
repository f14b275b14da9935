#!/usr/bin/env python3
"""`qlinear bench --report` rendered in headless Chromium (Debian's `chromium`, installed by tools/setup.sh):
each chart of the page is screenshotted alone and must be drawn at its size, not blank, with one line per
scheme in the scheme's colour inside the plot area (each speed-up line also screenshotted without the others,
which may cover it); the whole page must render too.

    report_in_browser.py QLINEAR_CLI WORK_DIR
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

CHART_W, CHART_H = 640, 360   # bench_report.hpp kChartWidth / kChartHeight
PLOT_RIGHT = 460              # bench_report.cpp kRight: the legend is right of it
SCHEMES = ["w8a8-int8-dynamic", "w4a16-mxfp4", "w8a16-fp8"]


def read_png(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB/RGBA non-interlaced PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    at, idat = 8, b""
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, f"{path}: unexpected PNG format"
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def screenshot(chromium, html, png, width, height):
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--force-device-scale-factor=1", f"--window-size={width},{height}", f"--screenshot={png}",
           "file://" + os.path.abspath(html)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, text=True)
    assert os.path.exists(png), f"chromium wrote no screenshot: {' '.join(cmd)}\n{r.stdout[-2000:]}"


def pixels_alone(chromium, work, kind, svg, group, scheme, colour):
    """Pixels of `colour` in the plot area with only `scheme`'s <g class='group'> elements kept: where two schemes
    measure alike, what is drawn later covers what was drawn before, which says nothing about whether it is drawn."""
    alone = re.sub(r"<g class='" + group + r"' data-scheme='(?!" + re.escape(scheme) + r"')[^']+'>.*?</g>", "",
                   svg, flags=re.S)
    html = os.path.join(work, f"{kind}-{scheme}.html")
    png = os.path.join(work, f"{kind}-{scheme}.png")
    open(html, "w").write("<!DOCTYPE html><html><body style='margin:0'>" + alone + "</body></html>")
    screenshot(chromium, html, png, CHART_W, CHART_H)
    _, _, rows = read_png(png)
    rgb = hex_rgb(colour)
    n = sum(1 for row in rows for px in row[:PLOT_RIGHT] if px == rgb)
    print(f"{kind}: {scheme} {colour}: {n} pixels in the plot area")
    return n


def hex_rgb(colour):
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def main():
    cli, work = sys.argv[1], sys.argv[2]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("FAIL: no chromium on PATH (tools/setup.sh installs Debian's chromium)")
        return 1
    os.makedirs(work, exist_ok=True)
    report = os.path.join(work, "report.html")
    subprocess.run([cli, "bench", "--scheme", ",".join(SCHEMES), "--n", "64", "--k", "128", "--m", "1,4,16",
                    "--reps", "2", "--compare", "reference", "--report", report], check=True,
                   stdout=subprocess.DEVNULL)
    page = open(report).read()
    charts = re.findall(r"<svg [^>]*class='(\w+)'.*?</svg>", page, re.S)
    bodies = re.findall(r"<svg .*?</svg>", page, re.S)
    assert charts.count("speedup") == 1 and charts.count("roofline") == 1, f"charts in the page: {charts}"
    failures = []
    for kind, svg in zip(charts, bodies):
        html = os.path.join(work, f"{kind}.html")
        png = os.path.join(work, f"{kind}.png")
        open(html, "w").write("<!DOCTYPE html><html><body style='margin:0'>" + svg + "</body></html>")
        screenshot(chromium, html, png, CHART_W, CHART_H)
        w, h, rows = read_png(png)
        if (w, h) != (CHART_W, CHART_H):
            failures.append(f"{kind}: screenshot {w}x{h}, expected {CHART_W}x{CHART_H}")
            continue
        drawn = sum(1 for row in rows for px in row if px != (255, 255, 255))
        if drawn < 0.03 * w * h:
            failures.append(f"{kind}: blank ({drawn} non-white pixels)")
        legend = re.findall(r"<g class='legend' data-scheme='([^']+)'><line [^>]*stroke='(#[0-9a-f]{6})'", svg)
        if [s for s, _ in legend] != SCHEMES:
            failures.append(f"{kind}: legend {legend}, expected one entry per scheme {SCHEMES}")
        if kind == "speedup":
            lines = re.findall(r"<g class='line' data-scheme='([^']+)'", svg)
            if lines != SCHEMES:
                failures.append(f"speedup: lines {lines}, expected one per scheme {SCHEMES}")
            for scheme, colour in legend:
                n = pixels_alone(chromium, work, kind, svg, "line", scheme, colour)
                if n < 300:  # a 3-pixel line across the plot; its three points alone are ~120
                    failures.append(f"speedup: the line of {scheme} ({colour}) is not drawn ({n} pixels)")
        else:
            for scheme, colour in legend:
                n = pixels_alone(chromium, work, kind, svg, "point", scheme, colour)
                if n < 3 * 20:  # three points of radius 4
                    failures.append(f"roofline: the points of {scheme} ({colour}) are not drawn ({n} pixels)")
    full = os.path.join(work, "page.png")
    screenshot(chromium, report, full, 900, 700)
    w, h, rows = read_png(full)
    drawn = sum(1 for row in rows for px in row if px != (255, 255, 255))
    if (w, h) != (900, 700) or drawn < 0.02 * w * h:
        failures.append(f"page: {w}x{h}, {drawn} non-white pixels")
    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
