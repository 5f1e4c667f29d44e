//! Sizes and the number-and-unit split written in flags and policies (`100M`, `64MiB`,
//! `30s`): the `--audit-max-size` flag, the policy's byte limits and, through
//! [`number_and_unit`], its durations ([`crate::limits::parse_duration`]).

/// Splits `30s` or `64MiB` (trimmed) into its leading whole number and the rest; `None`
/// when it does not start with digits or the number does not fit.
pub fn number_and_unit(text: &str) -> Option<(u64, &str)> {
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    Some((number.parse().ok()?, unit))
}

/// Parses a size: a number of bytes, optionally followed by `K`, `M` or `G` (powers of 1024;
/// `KiB`, `KB` and the like read the same, any case). Zero is refused.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (number, unit) = number_and_unit(text)
        .ok_or_else(|| format!("{text:?} is not a size (e.g. 100M, 1G, 65536)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("{text:?}: the unit must be K, M or G")),
    };
    match number.checked_mul(1 << shift) {
        Some(0) => Err(format!("{text:?}: the size must be above zero")),
        Some(size) => Ok(size),
        None => Err(format!("{text:?} is too large")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_size("65536"), Ok(65_536));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("100M"), Ok(100 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("10mb"), Ok(10 << 20));
        for bad in [
            "",
            "0",
            "0M",
            "M",
            "1T",
            "-1",
            "1.5M",
            "99999999999999999999G",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_number_is_split_from_its_unit() {
        assert_eq!(number_and_unit(" 30s "), Some((30, "s")));
        assert_eq!(number_and_unit("64MiB"), Some((64, "MiB")));
        assert_eq!(number_and_unit("7"), Some((7, "")));
        assert_eq!(number_and_unit("s"), None);
        assert_eq!(number_and_unit("99999999999999999999"), None);
    }
}
