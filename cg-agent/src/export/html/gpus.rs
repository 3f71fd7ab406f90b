//! The page's "GPUs" section: one chart per GPU of its own figures over time (utilisation and
//! memory in percent, temperature, power), from the time series' `gpus`, and the colour rule
//! every chart's series follow (a GPU's series never wears idle's colour).

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{buckets, esc, round3};
use crate::{
    printable::{fit, printable},
    report::view::{GpuView, PointGpuView, PointView},
};

/// The power chart's fixed parts and their colours, the same in every report.
pub const PART_COLOURS: [(&str, &str); 4] = [
    ("total (top-level domains)", "#1f77b4"),
    ("targets", "#2ca02c"),
    ("other tasks", "#ff7f0e"),
    ("idle", "#7f7f7f"),
];

/// Colours of energy domains (GPUs among them), in the order the chart lists them: none is a
/// fixed part's, so that gpu0 next to idle never reads as idle.
const DOMAIN_COLOURS: [&str; 8] = [
    "#d62728", "#9467bd", "#e377c2", "#17becf", "#8c564b", "#bcbd22", "#393b79", "#637939",
];

/// A GPU chart's figures: (name, colour, axis). Power has the domain's colour.
const GPU_FIGURES: [(&str, &str, &str); 3] = [
    ("utilisation (%)", "#1f77b4", "%"),
    ("memory used (%)", "#17becf", "%"),
    ("temperature (°C)", "#ff7f0e", "%"),
];

/// At most this many GPUs are charted (a report from elsewhere may name any number).
const MAX_GPU_CHARTS: usize = 16;

/// The colour of a part of the power chart (`None`: not a fixed part).
pub fn part_colour(name: &str) -> Option<&'static str> {
    PART_COLOURS
        .iter()
        .find(|(part, _)| *part == name)
        .map(|(_, colour)| *colour)
}

/// The colour of the `index`th domain of the power chart (the same domain, the same colour in
/// the GPU charts).
pub fn domain_colour(index: usize) -> &'static str {
    DOMAIN_COLOURS[index % DOMAIN_COLOURS.len()]
}

/// Mean of `figure` over each bucket, weighted by the points' durations (points without the
/// figure left out; a bucket with none is a gap).
fn bucket_mean(
    points: &[PointView],
    ranges: &[(usize, usize)],
    figure: impl Fn(&PointView) -> Option<f64>,
) -> Vec<Value> {
    ranges
        .iter()
        .map(|&(start, end)| {
            let (mut sum, mut weight) = (0.0, 0.0);
            for p in &points[start..end] {
                let w = p.duration_s.filter(|d| d.is_finite() && *d > 0.0);
                if let (Some(v), Some(w)) = (figure(p).filter(|v| v.is_finite()), w) {
                    sum += v * w;
                    weight += w;
                }
            }
            if weight > 0.0 {
                round3(sum / weight)
            } else {
                Value::Null
            }
        })
        .collect()
}

/// One figure of a GPU, read from a point.
type Figure<'a> = Box<dyn Fn(&PointView) -> Option<f64> + 'a>;

/// The figures of GPU `domain` in point `p`.
fn gpu_of<'a>(p: &'a PointView, domain: &str) -> Option<&'a PointGpuView> {
    p.gpus.iter().find(|g| g.domain.as_deref() == Some(domain))
}

/// The GPUs the series names, in order of first appearance, at most [`MAX_GPU_CHARTS`].
fn gpu_domains(points: &[PointView]) -> Vec<String> {
    let mut domains: Vec<String> = Vec::new();
    for g in points.iter().flat_map(|p| &p.gpus) {
        if let Some(d) = &g.domain
            && !domains.contains(d)
        {
            if domains.len() == MAX_GPU_CHARTS {
                break;
            }
            domains.push(d.clone());
        }
    }
    domains
}

/// The "GPUs" section, when the series has GPU figures. `domain_order`: the power chart's
/// domains, whose colours the GPUs' power series take.
pub fn section(
    body: &mut String,
    data: &mut serde_json::Map<String, Value>,
    gpus: &[GpuView],
    points: &[PointView],
    domain_order: &[String],
) {
    let domains = gpu_domains(points);
    if domains.is_empty() {
        return;
    }
    body.push_str("<h2>GPUs</h2>\n");
    let (per, ranges) = buckets(points.len());
    let t: Vec<Value> = ranges
        .iter()
        .map(|&(start, _)| round3(points[start].t_s.unwrap_or(f64::NAN)))
        .collect();
    let mut charts = Vec::new();
    for (n, domain) in domains.iter().enumerate() {
        let meta = gpus.iter().find(|g| g.domain == *domain);
        let total_bytes = meta.and_then(|g| g.memory_total_bytes).filter(|b| *b > 0.0);
        let figures: [Figure; 3] = [
            Box::new(|p| gpu_of(p, domain)?.utilization_pct),
            Box::new(|p| Some(gpu_of(p, domain)?.memory_used_bytes? / total_bytes? * 100.0)),
            Box::new(|p| gpu_of(p, domain)?.temperature_c),
        ];
        let mut series: Vec<Value> = GPU_FIGURES
            .iter()
            .zip(&figures)
            .map(|((name, colour, axis), figure)| {
                json!({"name": name, "colour": colour, "axis": axis,
                       "values": bucket_mean(points, &ranges, figure)})
            })
            .collect();
        let colour = domain_order
            .iter()
            .position(|d| d == domain)
            .map_or(DOMAIN_COLOURS[0], domain_colour);
        series.push(json!({"name": "power (W)", "colour": colour, "axis": "W",
                           "values": bucket_mean(points, &ranges, |p| gpu_of(p, domain)?.power_w)}));
        let name = meta.map_or("", |g| g.name.as_str());
        let title = format!("{} {}", printable(domain), printable(name));
        let _ = writeln!(
            body,
            "<h3>{}</h3>\n<div class=\"chart\" id=\"chart-gpu-{n}\"></div>",
            esc(&fit(title.trim(), 120))
        );
        charts.push(
            json!({"id": format!("chart-gpu-{n}"), "t": t, "series": series,
                           "x_label": "time since the start (s)",
                           "y_label": "% (utilisation, memory), °C", "y2_label": "power (W)"}),
        );
    }
    data.insert("gpus".into(), Value::Array(charts));
    let _ = writeln!(
        body,
        "<p class=\"note\">Measured by NVML: each interval's figures are its last poll (the \
         power here is NVML's power reading; the power chart's comes from the energy \
         counter); memory in percent of the GPU's memory{}.</p>",
        if per > 1 {
            format!(", each point the mean of {per} consecutive intervals")
        } else {
            String::new()
        }
    );
}
