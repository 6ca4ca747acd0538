//! The Prometheus text exposition format, as far as a scraper needs it:
//! each sample line `name{label="value",...} number [timestamp]` becomes
//! a [`Series`]; comments (`# HELP`, `# TYPE`) and blank lines are skipped,
//! and so is a line that does not parse (one bad line never hides the
//! rest). Label values are unescaped (`\"`, `\\`, `\n`).

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// A parsed `/metrics` page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    pub series: Vec<Series>,
}

impl Exposition {
    pub fn parse(text: &str) -> Self {
        let series = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .filter_map(parse_line)
            .collect();
        Self { series }
    }

    /// Every series of `name`.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Series> + 'a {
        self.series.iter().filter(move |s| s.name == name)
    }

    fn first(&self, name: &str) -> Option<&Series> {
        self.series.iter().find(|s| s.name == name)
    }

    /// The value of the first series of `name`.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.first(name).map(|s| s.value)
    }

    /// The sum over every series of `name` (several engines or models).
    pub fn sum(&self, name: &str) -> Option<f64> {
        let mut values = self.named(name).map(|s| s.value).peekable();
        values.peek()?;
        Some(values.sum())
    }

    /// The mean over every series of `name`.
    pub fn mean(&self, name: &str) -> Option<f64> {
        let values: Vec<f64> = self.named(name).map(|s| s.value).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }

    /// A label of the first series of `name`.
    pub fn label(&self, name: &str, label: &str) -> Option<&str> {
        let series = self.first(name)?;
        series
            .labels
            .iter()
            .find(|(key, _)| key == label)
            .map(|(_, value)| value.as_str())
    }
}

fn parse_line(line: &str) -> Option<Series> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inside) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inside)?;
        labels = parsed;
        rest = after;
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Series {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// `a="x",b="y"} rest` into the labels and `rest`.
fn parse_labels(mut text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches([',', ' ']);
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after) = text.split_once('=')?;
        let mut chars = after.strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_owned(), value));
        text = &after[1 + end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_labels_and_escapes_parse() {
        let page = "# HELP x y\n# TYPE a gauge\n\
            a 1.5\n\
            b{model_name=\"m \\\"q\\\"\",engine=\"0\"} 2 1700000000\n\
            b{model_name=\"m2\",engine=\"1\"} 3\n\
            c{le=\"+Inf\"} +Inf\n\
            broken{x=\"y 4\n\
            d NaN\n";
        let e = Exposition::parse(page);
        assert_eq!(e.value("a"), Some(1.5));
        assert_eq!(e.sum("b"), Some(5.0));
        assert_eq!(e.mean("b"), Some(2.5));
        assert_eq!(e.label("b", "model_name"), Some("m \"q\""));
        assert_eq!(e.label("b", "engine"), Some("0"));
        assert_eq!(e.value("c"), Some(f64::INFINITY));
        assert!(e.value("d").unwrap().is_nan());
        assert_eq!(e.value("broken"), None);
        assert_eq!(e.sum("missing"), None);
    }
}
