//! Converts `valgrind --tool=lackey --trace-mem=yes` output into accesses.
//!
//! Lackey prints one line per event: `I  addr,size` (instruction fetch),
//! ` L addr,size`, ` S addr,size`, ` M addr,size` (modify: a load and a
//! store). Instruction lines become the `gap` of the next data access; any
//! other line (the program's own stderr, valgrind's banner) is skipped.

use std::io::BufRead;

use crate::record::{Access, Sink};

/// What a conversion saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LackeyStats {
    pub lines: u64,
    pub accesses: u64,
    pub instructions: u64,
    pub skipped: u64,
}

fn parse(rest: &str) -> Option<(u64, u16)> {
    let (a, s) = rest.trim().split_once(',')?;
    let addr = u64::from_str_radix(a.trim(), 16).ok()?;
    let size: u16 = s.trim().parse().ok()?;
    (size > 0).then_some((addr, size))
}

/// Streams lackey output from `input` into `sink`.
pub fn convert<R: BufRead, S: Sink + ?Sized>(
    input: R,
    sink: &mut S,
) -> std::io::Result<LackeyStats> {
    convert_with(input, sink, |_| {})
}

/// As [`convert`], handing every line that is not a lackey record to `other`
/// (the traced program's own stderr shares valgrind's log).
pub fn convert_with<R: BufRead, S: Sink + ?Sized>(
    mut input: R,
    sink: &mut S,
    mut other: impl FnMut(&str),
) -> std::io::Result<LackeyStats> {
    let mut st = LackeyStats::default();
    let mut gap: u32 = 0;
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            break;
        }
        st.lines += 1;
        let l = line.trim_end();
        let (kind, rest) = if let Some(r) = l.strip_prefix("I  ") {
            ('I', r)
        } else if let Some(r) = l.strip_prefix(" L ") {
            ('L', r)
        } else if let Some(r) = l.strip_prefix(" S ") {
            ('S', r)
        } else if let Some(r) = l.strip_prefix(" M ") {
            ('M', r)
        } else {
            st.skipped += 1;
            other(l);
            continue;
        };
        let Some((addr, size)) = parse(rest) else {
            st.skipped += 1;
            other(l);
            continue;
        };
        match kind {
            'I' => {
                st.instructions += 1;
                gap = gap.saturating_add(1);
            }
            'L' | 'S' => {
                // The instruction that made this access is counted by the
                // record itself; the rest were non-memory instructions.
                let g = gap.saturating_sub(1);
                let a = if kind == 'L' {
                    Access::load(addr, size, g)
                } else {
                    Access::store(addr, size, g)
                };
                sink.access(a);
                st.accesses += 1;
                gap = 0;
            }
            _ => {
                sink.access(Access::load(addr, size, gap.saturating_sub(1)));
                sink.access(Access::store(addr, size, 0));
                st.accesses += 2;
                gap = 0;
            }
        }
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_lackey_lines() {
        let text = "==1== Lackey\nI  04000000,3\nI  04000003,4\n L 1ffefff8,8\nI  04000007,2\n S 00601040,4\n M 00601040,4\nhello from the program\n";
        let mut v: Vec<Access> = Vec::new();
        let st = convert(text.as_bytes(), &mut v).unwrap();
        assert_eq!(
            v,
            vec![
                Access::load(0x1ffefff8, 8, 1),
                Access::store(0x601040, 4, 0),
                Access::load(0x601040, 4, 0),
                Access::store(0x601040, 4, 0),
            ]
        );
        assert_eq!(st.accesses, 4);
        assert_eq!(st.instructions, 3);
        assert_eq!(st.skipped, 2);
    }
}
