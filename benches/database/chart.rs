//! The benchmark's chart: four panels of bars, one group of bars per setup
//! and row count, one bar per key, each a ratio to the serial key of the
//! same group (the dashed line at 1).

use std::path::Path;

use plotters::prelude::*;

use crate::{base_of, Db, Key, Measurement, Setup};

const WIDTH: u32 = 1400;
const HEIGHT: u32 = 1000;
const FONT: &str = "sans-serif";

/// Colours per key, in [`Key::ALL`] order: grey for the serial baseline,
/// light blue for the counter (SQLite's floor for a given key), blue for
/// idutil, orange and red for the UUIDs; the diagnostic keys after them.
const COLOURS: [RGBColor; Key::ALL.len()] = [
    RGBColor(150, 150, 150),
    RGBColor(158, 202, 225),
    RGBColor(31, 119, 180),
    RGBColor(255, 160, 60),
    RGBColor(214, 39, 40),
    RGBColor(90, 90, 90),
    RGBColor(116, 196, 118),
    RGBColor(117, 107, 177),
];

/// What one panel shows of a measurement, and for which databases.
struct Panel {
    title: &'static str,
    value: fn(&Measurement) -> Option<f64>,
    only: Option<Db>,
}

const PANELS: [Panel; 4] = [
    Panel {
        title: "Rows inserted per second (higher is better)",
        value: |m| Some(m.rows as f64 / m.seconds),
        only: None,
    },
    Panel {
        title: "Primary-key index size, PostgreSQL (lower is better)",
        value: |m| Some(m.pk_bytes as f64),
        only: Some(Db::Postgres),
    },
    Panel {
        title: "Table + all indexes on disk (lower is better)",
        value: |m| Some(m.total_bytes() as f64),
        only: None,
    },
    Panel {
        title: "Write-ahead log written, PostgreSQL (lower is better)",
        value: |m| m.wal_bytes.map(|w| w as f64),
        only: Some(Db::Postgres),
    },
];

fn group_label((setup, rows): (Setup, u64)) -> String {
    let db = match setup.db {
        Db::Postgres => "PG",
        Db::Sqlite => "SQLite",
    };
    let rows = if rows % 1_000_000 == 0 {
        format!("{}M", rows / 1_000_000)
    } else if rows % 1_000 == 0 {
        format!("{}k", rows / 1_000)
    } else {
        rows.to_string()
    };
    let clients = if setup.clients == 1 {
        "1 client".to_string()
    } else {
        format!("{} clients", setup.clients)
    };
    format!("{db} · {clients} · {rows}")
}

/// Draws the results into an SVG file at `path`.
pub fn draw(results: &[Measurement], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "Primary keys compared: each bar ÷ bigserial (SQLite: INTEGER PRIMARY KEY) in the same run; \
         PG = PostgreSQL",
        (FONT, 24),
    )?;
    let areas = root.split_evenly((2, 2));
    for (area, panel) in areas.iter().zip(PANELS.iter()) {
        draw_panel(area, panel, results)?;
    }
    root.present()?;
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
    results: &[Measurement],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let mut groups: Vec<(Setup, u64)> = results
        .iter()
        .filter(|m| panel.only.is_none_or(|db| m.setup.db == db))
        .map(|m| (m.setup, m.rows))
        .collect();
    groups.sort_by_key(|&(s, rows)| (s.db, rows, s.clients));
    groups.dedup();
    // (group, key, slot in the group, ratio): each group's bars side by
    // side, in `Key::ALL` order, as many as it has keys.
    let mut bars = Vec::new();
    for (g, &(setup, rows)) in groups.iter().enumerate() {
        let mut slot = 0;
        for (k, key) in Key::ALL.into_iter().enumerate() {
            let Some(m) = results
                .iter()
                .find(|m| m.setup == setup && m.rows == rows && m.key == key)
            else {
                continue;
            };
            let Some(base) = base_of(results, m) else {
                continue;
            };
            if let (Some(v), Some(b)) = ((panel.value)(m), (panel.value)(base)) {
                if b > 0.0 {
                    bars.push((g, k, slot, v / b));
                    slot += 1;
                }
            }
        }
    }
    // Room above the bars for the legend.
    let top = bars.iter().map(|&(_, _, _, r)| r).fold(1.0f64, f64::max) * 1.5;
    let n = groups.len().max(1);
    let labels: Vec<String> = groups.iter().map(|&g| group_label(g)).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, (FONT, 19))
        .margin(14)
        .x_label_area_size(34)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..n as f64, 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE.mix(0.0))
        // Ticks every half group: the labels go on the groups' centres.
        .x_labels(2 * n + 1)
        .x_label_formatter(&|x| {
            let g = x.floor();
            if (x - g - 0.5).abs() > 1e-6 {
                return String::new();
            }
            labels.get(g as usize).cloned().unwrap_or_default()
        })
        .x_label_style((FONT, 12))
        .y_desc("× the serial key")
        .y_label_formatter(&|y| format!("{y:.1}×"))
        .draw()?;
    let slots = bars.iter().map(|&(_, _, s, _)| s + 1).max().unwrap_or(1);
    let width = 0.8 / slots as f64;
    for (k, key) in Key::ALL.into_iter().enumerate() {
        let colour = COLOURS[k];
        let mine: Vec<(f64, f64)> = bars
            .iter()
            .filter(|&&(_, bk, _, _)| bk == k)
            .map(|&(g, _, s, r)| (g as f64 + 0.1 + s as f64 * width, r))
            .collect();
        if mine.is_empty() {
            continue;
        }
        chart
            .draw_series(mine.iter().map(|&(x0, r)| {
                Rectangle::new([(x0, 0.0), (x0 + width * 0.92, r)], colour.filled())
            }))?
            .label(key.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
        chart.draw_series(mine.iter().map(|&(x0, r)| {
            Text::new(
                format!("{r:.2}"),
                (x0 + width * 0.46, r + top * 0.012),
                TextStyle::from((FONT, 12).into_font()).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Bottom,
                    ),
                ),
            )
        }))?;
    }
    chart.draw_series(DashedLineSeries::new(
        [(0.0, 1.0), (n as f64, 1.0)],
        6,
        4,
        BLACK.stroke_width(1),
    ))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()?;
    Ok(())
}
