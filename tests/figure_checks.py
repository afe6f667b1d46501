"""What a lesson figure must be to be read on a phone (STYLE §17): large type, no text over other
text, legends off the data, nothing cut off at the edges. `problems(fig)` lists what breaks that,
measured on the drawn figure (its texts' boxes in pixels), so a test can assert it is empty."""

from __future__ import annotations

from bytesup.lessons import MIN_FONT_PT

SLACK_PX = 1.0  # boxes that touch by less than this do not count as overlapping


def _undrawn_tick_labels(fig) -> set[int]:
    """Tick labels matplotlib keeps but does not draw: their tick lies outside the axis' view."""
    skip = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            span = (hi - lo) * 1e-9
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - span <= tick.get_loc() <= hi + span:
                    skip.update({id(tick.label1), id(tick.label2)})
    return skip


def _texts(fig):
    """Every visible, non-empty text artist the figure draws."""
    from matplotlib.text import Text

    skip = _undrawn_tick_labels(fig)
    out = []
    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip() and id(t) not in skip:
            out.append(t)
    return out


def _overlap(a, b) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > SLACK_PX and min(a.y1, b.y1) - max(a.y0, b.y0) > SLACK_PX


def problems(fig) -> list[str]:
    """Texts under MIN_FONT_PT, texts overlapping one another, texts outside the canvas, and
    legends drawn over an axes' plotting area."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    canvas = fig.bbox
    texts = _texts(fig)
    boxes = []
    for t in texts:
        label = repr(t.get_text()[:30])
        if t.get_fontsize() < MIN_FONT_PT - 1e-9:
            found.append(f"{label}: {t.get_fontsize():g} pt, under {MIN_FONT_PT:g}")
        box = t.get_window_extent(renderer)
        if box.x0 < canvas.x0 - SLACK_PX or box.y0 < canvas.y0 - SLACK_PX:
            found.append(f"{label}: cut off at the figure's edge")
        elif box.x1 > canvas.x1 + SLACK_PX or box.y1 > canvas.y1 + SLACK_PX:
            found.append(f"{label}: cut off at the figure's edge")
        boxes.append((label, box))
    for i, (la, a) in enumerate(boxes):
        for lb, b in boxes[i + 1 :]:
            if _overlap(a, b):
                found.append(f"{la} overlaps {lb}")
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not legend.get_visible():
            continue
        lb = legend.get_window_extent(renderer)
        for other in fig.axes:
            if other.get_label() == "<colorbar>":
                continue
            if _overlap(lb, other.get_window_extent(renderer)):
                found.append(f"the legend of {ax.get_title()[:30]!r} lies over the data")
    for legend in fig.legends:
        lb = legend.get_window_extent(renderer)
        for other in fig.axes:
            if other.get_label() != "<colorbar>" and _overlap(lb, other.get_window_extent(renderer)):
                found.append("the figure legend lies over the data")
    return found
