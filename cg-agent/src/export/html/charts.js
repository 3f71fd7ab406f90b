// cg-trace HTML report: draws the charts from the data block (#cg-data) with uPlot. Every
// string in the data is shown through uPlot's text labels (never parsed as HTML).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("cg-data").textContent);
  var palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf"];
  var rendered = 0;
  var charts = [];

  function fmt(v, unit) {
    if (v == null || !isFinite(v)) return "—";
    var a = Math.abs(v);
    var digits = a >= 100 ? 1 : a >= 1 ? 2 : 3;
    return v.toFixed(digits) + " " + unit;
  }

  function width(el) {
    return Math.max(320, (el.clientWidth || 900) - 4);
  }

  function draw(id, opts, columns) {
    var el = document.getElementById(id);
    if (!el) return;
    opts.width = width(el);
    opts.height = opts.height || 320;
    var chart = new uPlot(opts, columns, el);
    charts.push([chart, el]);
    rendered++;
    el.setAttribute("data-rendered", "true");
  }

  function lines(id, block, yLabel, unit) {
    var series = [{ label: block.x_label, value: function (u, v) { return fmt(v, "s"); } }];
    var columns = [block.t];
    block.series.forEach(function (s, i) {
      series.push({
        label: s.name,
        stroke: s.colour || palette[i % palette.length],
        width: s.name === block.emphasis ? 2.5 : 1.5,
        spanGaps: false,
        value: function (u, v) { return fmt(v, unit); }
      });
      columns.push(s.values);
    });
    draw(id, {
      scales: { x: { time: false } },
      axes: [{ label: block.x_label }, { label: yLabel, size: 70 }],
      series: series
    }, columns);
  }

  if (data.power) lines("chart-power", data.power, data.power.y_label, "W");
  if (data.process_power) lines("chart-process-power", data.process_power, data.process_power.y_label, "W");

  // One chart per GPU: percentages and temperature on the left axis, power on the right.
  (data.gpus || []).forEach(function (block) {
    var series = [{ label: block.x_label, value: function (u, v) { return fmt(v, "s"); } }];
    var columns = [block.t];
    block.series.forEach(function (s) {
      var unit = s.axis === "W" ? "W" : s.name.indexOf("°C") >= 0 ? "°C" : "%";
      series.push({
        label: s.name,
        stroke: s.colour,
        width: 1.5,
        scale: s.axis === "W" ? "W" : "%",
        spanGaps: false,
        value: function (u, v) { return fmt(v, unit); }
      });
      columns.push(s.values);
    });
    draw(block.id, {
      height: 260,
      scales: { x: { time: false }, "%": { range: [0, 100] } },
      axes: [{ label: block.x_label }, { scale: "%", label: block.y_label, size: 70 },
        { scale: "W", side: 1, label: block.y2_label, size: 70, grid: { show: false } }],
      series: series
    }, columns);
  });

  if (data.runs) {
    var r = data.runs;
    var points = function () { return null; };
    draw("chart-runs", {
      height: 280,
      scales: { x: { time: false } },
      axes: [{ label: "run", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] },
        { label: r.y_label, size: 70 }],
      series: [
        { label: "run", value: function (u, v) { return v == null ? "—" : "run " + v; } },
        { label: "energy per run", stroke: palette[0], paths: points, points: { show: true, size: 9, fill: palette[0] },
          value: function (u, v) { return fmt(v, "J"); } },
        { label: "IQR outlier", stroke: palette[1], paths: points, points: { show: true, size: 11, fill: palette[1] },
          value: function (u, v) { return fmt(v, "J"); } },
        { label: "median", stroke: "#555", width: 1, dash: [6, 4], points: { show: false },
          value: function (u, v) { return fmt(v, "J"); } }
      ]
    }, [r.index, r.energy_j, r.outlier_energy_j, r.median_j]);
  }

  window.addEventListener("resize", function () {
    charts.forEach(function (c) { c[0].setSize({ width: width(c[1]), height: c[0].height }); });
  });
  document.body.setAttribute("data-charts-rendered", String(rendered));
})();
