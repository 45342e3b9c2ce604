"""E2B's chart model (e2b_code_interpreter.charts) for ctxd.e2b: the
objects a figure's structured chart becomes on the client. The chart itself
is extracted in the context (ctxd/_e2b_helper.py)."""

from __future__ import annotations

import enum
from typing import Any, Dict, List, Optional, Tuple


# ---- charts -------------------------------------------------------------------------


class ChartType(str, enum.Enum):
    """E2B's chart types."""

    LINE = "line"
    SCATTER = "scatter"
    BAR = "bar"
    PIE = "pie"
    BOX_AND_WHISKER = "box_and_whisker"
    SUPERCHART = "superchart"
    UNKNOWN = "unknown"


class ScaleType(str, enum.Enum):
    """E2B's axis scale types."""

    LINEAR = "linear"
    DATETIME = "datetime"
    CATEGORICAL = "categorical"
    LOG = "log"
    SYMLOG = "symlog"
    LOGIT = "logit"
    FUNCTION = "function"
    FUNCTIONLOG = "functionlog"
    ASINH = "asinh"
    UNKNOWN = "unknown"


def _scale(v: Any) -> ScaleType:
    """A scale name as ScaleType (UNKNOWN for one E2B does not name)."""
    try:
        return ScaleType(v)
    except ValueError:
        return ScaleType.UNKNOWN


class Chart:
    """A chart's data: type, title, elements; to_dict() gives the raw form."""

    type: ChartType
    title: Optional[str]
    elements: List[Any]

    def __init__(self, **kw: Any) -> None:
        self._raw = kw
        try:
            self.type = ChartType(kw.get("type") or "unknown")
        except ValueError:
            self.type = ChartType.UNKNOWN
        self.title = kw.get("title")
        self.elements = list(kw.get("elements") or [])

    def to_dict(self) -> Dict[str, Any]:
        """The chart as the extractor made it (E2B's wire form)."""
        return self._raw

    def __repr__(self) -> str:
        return f"{type(self).__name__}(title={self.title!r}, elements={len(self.elements)})"


class Chart2D(Chart):
    """A chart with axes: x_label, y_label, x_unit, y_unit."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.x_label: Optional[str] = kw.get("x_label")
        self.y_label: Optional[str] = kw.get("y_label")
        self.x_unit: Optional[str] = kw.get("x_unit")
        self.y_unit: Optional[str] = kw.get("y_unit")


class PointData:
    """One line or point set: label and (x, y) points."""

    def __init__(self, **kw: Any) -> None:
        self.label: str = kw.get("label", "")
        self.points: List[Tuple[Any, Any]] = [(x, y) for x, y in kw.get("points") or []]

    def __repr__(self) -> str:
        return f"PointData(label={self.label!r}, points={len(self.points)})"


class PointChart(Chart2D):
    """A line or scatter chart: ticks, tick labels and scales per axis."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.x_ticks: List[Any] = list(kw.get("x_ticks") or [])
        self.x_tick_labels: List[str] = list(kw.get("x_tick_labels") or [])
        self.x_scale = _scale(kw.get("x_scale"))
        self.y_ticks: List[Any] = list(kw.get("y_ticks") or [])
        self.y_tick_labels: List[str] = list(kw.get("y_tick_labels") or [])
        self.y_scale = _scale(kw.get("y_scale"))
        self.elements = [PointData(**d) for d in kw.get("elements") or []]


class LineChart(PointChart):
    type = ChartType.LINE


class ScatterChart(PointChart):
    type = ChartType.SCATTER


class BarData:
    """One bar: its label (the tick under it), group (the bar set) and value."""

    def __init__(self, **kw: Any) -> None:
        self.label: str = kw.get("label", "")
        self.group: str = kw.get("group", "")
        self.value: Any = kw.get("value")

    def __repr__(self) -> str:
        return f"BarData(label={self.label!r}, group={self.group!r}, value={self.value!r})"


class BarChart(Chart2D):
    type = ChartType.BAR

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.elements = [BarData(**d) for d in kw.get("elements") or []]


class PieData:
    """One wedge: label, angle (degrees), radius."""

    def __init__(self, **kw: Any) -> None:
        self.label: str = kw.get("label", "")
        self.angle: float = kw.get("angle")
        self.radius: float = kw.get("radius")

    def __repr__(self) -> str:
        return f"PieData(label={self.label!r}, angle={self.angle!r})"


class PieChart(Chart):
    type = ChartType.PIE

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.elements = [PieData(**d) for d in kw.get("elements") or []]


class BoxAndWhiskerData:
    """One box: label, min, first_quartile, median, third_quartile, max,
    outliers."""

    def __init__(self, **kw: Any) -> None:
        self.label: str = kw.get("label", "")
        self.min = kw.get("min")
        self.first_quartile = kw.get("first_quartile")
        self.median = kw.get("median")
        self.third_quartile = kw.get("third_quartile")
        self.max = kw.get("max")
        self.outliers: List[float] = list(kw.get("outliers") or [])


class BoxAndWhiskerChart(Chart2D):
    type = ChartType.BOX_AND_WHISKER

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.elements = [BoxAndWhiskerData(**d) for d in kw.get("elements") or []]


class SuperChart(Chart):
    """A figure with several axes: one chart per axes in elements."""

    type = ChartType.SUPERCHART

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.elements = [c for c in (_chart(d) for d in kw.get("elements") or []) if c]


_CHART_CLASSES = {"line": LineChart, "scatter": ScatterChart, "bar": BarChart, "pie": PieChart,
                  "box_and_whisker": BoxAndWhiskerChart, "superchart": SuperChart}


def _chart(d: Any) -> Optional[Chart]:
    """A chart object from its dict form (None for none)."""
    if not isinstance(d, dict) or not d:
        return None
    return _CHART_CLASSES.get(d.get("type"), Chart)(**d)
