// ---------------------------------------------------------------------------
// Task names for the legend

use std::collections::HashMap;
use std::fmt::Write as _;

/// Short names for the legend and the bar labels, one per name in `names`:
/// Rust paths lose `{{closure}}` segments and the leading segments all of
/// them share; user-given names stay as they are. Where two names would
/// look the same, they get their closure segments back, then their full
/// names.
pub(crate) fn short_names(names: &[String]) -> Vec<String> {
    let paths: Vec<Option<Vec<String>>> = names
        .iter()
        .map(|n| is_rust_path(n).then(|| split_path(n)))
        .collect();
    // The leading segments that every Rust path shares (each keeps at least
    // its last segment).
    let mut common: Option<Vec<String>> = None;
    for segments in paths.iter().flatten() {
        let plain: Vec<String> = segments.iter().filter(|s| !is_noise(s)).cloned().collect();
        let keep = plain.len().saturating_sub(1);
        common = Some(match common {
            None => plain[..keep].to_vec(),
            Some(c) => c
                .iter()
                .zip(&plain[..keep])
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a.clone())
                .collect(),
        });
    }
    let common = common.map_or(0, |c| c.len());

    let short = |i: usize, level: u8| -> String {
        let Some(segments) = &paths[i] else {
            return names[i].clone();
        };
        if level >= 2 {
            return names[i].clone();
        }
        let mut kept = Vec::new();
        let mut closures = 0;
        let mut plain_seen = 0;
        for s in segments {
            if is_noise(s) {
                if s.contains("closure") {
                    closures += 1;
                }
                continue;
            }
            plain_seen += 1;
            if plain_seen > common {
                kept.push(s.as_str());
            }
        }
        if kept.len() > 3 {
            kept.drain(..kept.len() - 3);
            kept.insert(0, "…");
        }
        let mut text = kept.join("::");
        if level == 1 && closures == 1 {
            text.push_str("::{closure}");
        } else if level == 1 && closures > 1 {
            let _ = write!(text, "::{{closure ×{closures}}}");
        }
        if text.is_empty() {
            names[i].clone()
        } else {
            text
        }
    };

    let mut level = vec![0u8; names.len()];
    let mut result: Vec<String> = (0..names.len()).map(|i| short(i, 0)).collect();
    for _ in 0..2 {
        let mut seen: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, s) in result.iter().enumerate() {
            seen.entry(s.as_str()).or_default().push(i);
        }
        let clashes: Vec<usize> = seen
            .values()
            .filter(|v| v.len() > 1)
            .flatten()
            .copied()
            .filter(|&i| paths[i].is_some() && level[i] < 2)
            .collect();
        if clashes.is_empty() {
            break;
        }
        for i in clashes {
            level[i] += 1;
            result[i] = short(i, level[i]);
        }
    }
    result
}

/// Whether a name looks like a Rust path (`std::any::type_name` of a
/// closure, say) rather than a name the user gave.
fn is_rust_path(name: &str) -> bool {
    name.contains("::")
        && !name.contains(": ")
        && !name.starts_with(char::is_whitespace)
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || "_:{}<>&,' []()*;#-!".contains(c))
}

/// The segments of a Rust path, split at the `::` outside angle brackets.
fn split_path(path: &str) -> Vec<String> {
    let mut segments = Vec::new();
    let mut depth = 0i32;
    let mut current = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            ':' if depth == 0 && chars.peek() == Some(&':') => {
                chars.next();
                segments.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    segments.push(current);
    segments.retain(|s| !s.is_empty());
    segments
}

/// Segments that say nothing to a reader: closures, constants, symbol
/// hashes.
fn is_noise(segment: &str) -> bool {
    (segment.starts_with('{') && segment.ends_with('}'))
        || (segment.len() == 17
            && segment.starts_with('h')
            && segment[1..].chars().all(|c| c.is_ascii_hexdigit()))
}
