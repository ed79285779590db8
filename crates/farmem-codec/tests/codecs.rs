//! Round trips, exact sizes on crafted pages, and robustness on corrupt input.

use farmem_codec::{CodecError, CodecKind, FpcBdi, Fve, Lz, NoCodec, PageCodec};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const PAGE: usize = 4096;

fn codecs() -> Vec<&'static dyn PageCodec> {
    CodecKind::ALL.iter().map(|k| k.codec()).collect()
}

fn enc(c: &dyn PageCodec, page: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    c.compress(page, &mut out);
    assert_eq!(
        out.len(),
        c.compressed_len(page),
        "{}: compressed_len disagrees with compress",
        c.name()
    );
    out
}

fn dec(c: &dyn PageCodec, data: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    c.decompress(data, &mut out).map(|()| out)
}

fn round_trip(page: &[u8]) {
    for c in codecs() {
        let data = enc(c, page);
        assert_eq!(
            dec(c, &data).as_deref(),
            Ok(page),
            "{} round trip ({} bytes)",
            c.name(),
            page.len()
        );
    }
}

fn rng() -> SmallRng {
    SmallRng::seed_from_u64(0x5eed)
}

fn random_page(r: &mut SmallRng) -> Vec<u8> {
    (0..PAGE).map(|_| r.r#gen()).collect()
}

fn small_ints(r: &mut SmallRng) -> Vec<u8> {
    (0..PAGE / 4)
        .flat_map(|_| r.gen_range(0u32..100).to_le_bytes())
        .collect()
}

fn pointers(r: &mut SmallRng) -> Vec<u8> {
    (0..PAGE / 8)
        .flat_map(|_| (0x0000_7f3a_1c00_0000u64 + r.gen_range(0..65536u64) * 16).to_le_bytes())
        .collect()
}

fn text(r: &mut SmallRng) -> Vec<u8> {
    let words = [
        "the", "far", "memory", "page", "of", "a", "node", "is", "cache", "line", "remote", "and",
    ];
    let mut t = Vec::new();
    while t.len() < PAGE {
        t.extend_from_slice(words[r.gen_range(0..words.len())].as_bytes());
        t.push(if r.gen_ratio(1, 9) { b'\n' } else { b' ' });
    }
    t.truncate(PAGE);
    t
}

#[test]
fn round_trips_on_page_kinds() {
    let mut r = rng();
    round_trip(&[0u8; PAGE]);
    round_trip(&random_page(&mut r));
    round_trip(&small_ints(&mut r));
    round_trip(&pointers(&mut r));
    round_trip(&text(&mut r));
    let doubles: Vec<u8> = (0..PAGE / 8)
        .flat_map(|i| (1.5f64 + i as f64 * 0.25).to_le_bytes())
        .collect();
    round_trip(&doubles);
    // Lengths that are not multiples of a word, a line or an LZ unit.
    let big = random_page(&mut r).repeat(3);
    for len in [
        0,
        1,
        3,
        4,
        5,
        63,
        64,
        65,
        127,
        1023,
        1024,
        1025,
        4095,
        5000,
        3 * PAGE,
    ] {
        round_trip(&big[..len]);
        round_trip(&vec![0u8; len]);
        round_trip(&small_ints(&mut r).repeat(4)[..len]);
    }
    // A 2 MiB huge page (DaeMon §4.7's large-page extension).
    let mut huge = Vec::new();
    for i in 0..512 {
        huge.extend(if i % 8 == 0 {
            pointers(&mut r)
        } else {
            text(&mut r)
        });
    }
    assert_eq!(huge.len(), 2 << 20);
    round_trip(&huge);
}

#[test]
fn zero_page_sizes_by_hand() {
    let zero = [0u8; PAGE];
    // LZ: varint(4096) = 2 bytes; each 1 KiB unit = 2-byte header + LZ4 block
    // of 15 bytes: token (1 literal, long match), the literal 0, offset 1
    // (2 bytes), match length 1017 = 4 + 15 + 255*3 + 233 (4 bytes), then the
    // final token and 6 literals LZ4 keeps at the end (7 bytes). 2 + 4*17 = 70.
    assert_eq!(Lz.compressed_len(&zero), 70);
    // FPC+BDI: varint 2 + 64 four-bit "zero line" tags (32 bytes), no payload.
    assert_eq!(FpcBdi.compressed_len(&zero), 34);
    // FVE: varint 2 + D=1 (1 byte) + dictionary {0} (4 bytes) + one hit bit
    // and no index bits per word: 1024 bits = 128 bytes. 2+1+4+128 = 135.
    assert_eq!(Fve.compressed_len(&zero), 135);
    assert_eq!(NoCodec.compressed_len(&zero), PAGE);
    let empty: [u8; 0] = [];
    assert_eq!(Lz.compressed_len(&empty), 1);
    assert_eq!(FpcBdi.compressed_len(&empty), 1);
    assert_eq!(Fve.compressed_len(&empty), 2);
}

#[test]
fn random_pages_grow_by_a_small_bounded_header() {
    let mut r = rng();
    for _ in 0..20 {
        let page = random_page(&mut r);
        // LZ: every unit falls back to raw: 2 + 4 * (2 + 1024).
        assert_eq!(Lz.compressed_len(&page), 4106);
        // FPC+BDI: all lines raw: 2 + 32 tag bytes + 4096.
        assert_eq!(FpcBdi.compressed_len(&page), 4130);
        // FVE: no repeated words, D = 0: 2 + 1 + 4096 literals.
        assert_eq!(Fve.compressed_len(&page), 4099);
    }
}

/// u64 line of `base + i` for i in 0..8 (a pointer-like array).
fn ptr_line(base: u64) -> Vec<u8> {
    (0..8u64)
        .flat_map(|i| (base + i * 8).to_le_bytes())
        .collect()
}

#[test]
fn fpc_bdi_crafted_lines() {
    // Pointer-like: B8D1 (8-byte base, one mask byte, eight 1-byte deltas) = 17.
    let page: Vec<u8> = (0..64u64)
        .flat_map(|l| ptr_line(0x0000_7f12_3456_0000 + l * 4096))
        .collect();
    assert_eq!(FpcBdi.compressed_len(&page), 2 + 32 + 64 * 17);
    // Eight copies of one non-zero u64: repeated value, 8 bytes per line.
    let rep: Vec<u8> = 0xdead_beef_cafe_f00du64.to_le_bytes().repeat(PAGE / 8);
    assert_eq!(FpcBdi.compressed_len(&rep), 2 + 32 + 64 * 8);
    // Words 0,1,..,7,0,1,..,7: FPC codes each zero as a 1-word zero run
    // (3+3 bits) and each 1..7 as a 4-bit value (3+4 bits): 2*6 + 14*7 = 110
    // bits = 14 bytes, beating BDI's best (B4D1, 22 bytes).
    let small: Vec<u8> = (0..PAGE / 4)
        .flat_map(|i| ((i % 8) as u32).to_le_bytes())
        .collect();
    assert_eq!(FpcBdi.compressed_len(&small), 2 + 32 + 64 * 14);
    // One 65-byte page: 2 lines (one tag byte); the second is the zero-padded
    // line [1, 0 x 63]: FPC codes word 1 as a 4-bit value (3+4 bits) and the
    // 15 zero words as runs of 8 and 7 (6 bits each): 19 bits = 3 bytes,
    // beating BDI's B8D1 (17). Varint(65) = 1 byte. 1 + 1 + 3 = 5.
    let mut odd = vec![0u8; 65];
    odd[64] = 1;
    assert_eq!(FpcBdi.compressed_len(&odd), 1 + 1 + 3);
    for p in [&page, &rep, &small, &odd] {
        round_trip(p);
    }
}

#[test]
fn fve_crafted_dictionary() {
    // Three large values cycling: D = 3, 2 index bits: each word 3 bits,
    // 1024 words = 384 bytes; + 2 varint + 1 (D) + 12 (dictionary) = 399.
    let vals = [0x1234_5678u32, 0x9abc_def0, 0x0f0f_f0f0];
    let page: Vec<u8> = (0..PAGE / 4)
        .flat_map(|i| vals[i % 3].to_le_bytes())
        .collect();
    assert_eq!(Fve.compressed_len(&page), 399);
    round_trip(&page);
}

#[test]
fn corrupt_inputs_are_errors() {
    let mut r = rng();
    let pages = [
        vec![0u8; PAGE],
        random_page(&mut r),
        small_ints(&mut r),
        pointers(&mut r),
        text(&mut r),
    ];
    for c in [&Lz as &dyn PageCodec, &FpcBdi, &Fve] {
        for page in &pages {
            let data = enc(c, page);
            // Every strict prefix is refused.
            for cut in 0..data.len() {
                assert!(
                    dec(c, &data[..cut]).is_err(),
                    "{}: prefix {cut} of {} accepted",
                    c.name(),
                    data.len()
                );
            }
            // Trailing garbage is refused.
            let mut long = data.clone();
            long.push(0);
            assert!(
                matches!(dec(c, &long), Err(CodecError::TrailingBytes { .. })),
                "{}",
                c.name()
            );
        }
        // A header claiming far more than the input could hold.
        let err = dec(c, &[0xff, 0xff, 0xff, 0x7f, 0, 0]).unwrap_err();
        assert!(
            matches!(err, CodecError::TooLarge { .. }),
            "{}: {err}",
            c.name()
        );
        assert!(err.to_string().starts_with(c.name()), "{err}");
    }
    // An invalid FPC+BDI tag.
    assert!(matches!(
        dec(&FpcBdi, &[64, 0x0f]),
        Err(CodecError::BadTag { tag: 15, .. })
    ));
    // FVE dictionary larger than the table.
    assert!(matches!(
        dec(&Fve, &[4, 65]),
        Err(CodecError::Corrupt { .. })
    ));
}

/// Pages built from lines of the kinds the codecs target.
fn line_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(vec![0u8; 64]),
        any::<u64>().prop_map(|v| v.to_le_bytes().repeat(8)),
        (any::<u64>(), prop::collection::vec(-200i64..200, 8)).prop_map(|(b, d)| d
            .iter()
            .flat_map(|&x| b.wrapping_add(x as u64).to_le_bytes())
            .collect()),
        (any::<u32>(), prop::collection::vec(-40000i32..40000, 16)).prop_map(|(b, d)| d
            .iter()
            .flat_map(|&x| b.wrapping_add(x as u32).to_le_bytes())
            .collect()),
        prop::collection::vec(
            prop_oneof![
                Just(0u32),
                (-9i32..9).prop_map(|x| x as u32),
                any::<u32>(),
                (any::<u8>()).prop_map(|b| u32::from(b) * 0x0101_0101),
                (any::<u16>()).prop_map(|h| u32::from(h) << 16),
                (-128i32..128, -128i32..128)
                    .prop_map(|(h, l)| ((h as u32 & 0xffff) << 16) | (l as u32 & 0xffff))
            ],
            16
        )
        .prop_map(|w| w.iter().flat_map(|x| x.to_le_bytes()).collect()),
        prop::collection::vec(-100i16..100, 32)
            .prop_map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        prop::collection::vec(
            prop::sample::select(vec![b'a', b'e', b' ', b't', b'\n']),
            64
        ),
        prop::collection::vec(any::<u8>(), 64),
    ]
}

fn page_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), PAGE),
        prop::collection::vec(line_strategy(), 64).prop_map(|ls| ls.concat()),
        (prop::collection::vec(line_strategy(), 1..80), 0..64usize).prop_map(|(ls, cut)| {
            let mut p = ls.concat();
            p.truncate(p.len() - cut.min(p.len()));
            p
        }),
        // Pages of words from a small per-page vocabulary (FVE's case).
        (
            prop::collection::vec(any::<u32>(), 1..80),
            prop::collection::vec(any::<prop::sample::Index>(), PAGE / 4)
        )
            .prop_map(|(vocab, picks)| picks
                .iter()
                .flat_map(|i| vocab[i.index(vocab.len())].to_le_bytes())
                .collect()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn decompress_inverts_compress(page in page_strategy()) {
        for c in codecs() {
            let data = enc(c, &page);
            let back = dec(c, &data);
            prop_assert_eq!(back.as_deref(), Ok(&page[..]), "{}", c.name());
            // Bounded growth: never more than the header and per-unit tags.
            let n = page.len();
            let bound = match c.name() {
                "lz" => 10 + n + 2 * n.div_ceil(1024),
                "fpc-bdi" => 10 + n.div_ceil(64) * 64 + n.div_ceil(128),
                "fve" => 10 + 1 + n.div_ceil(4) * 4,
                _ => n,
            };
            prop_assert!(data.len() <= bound, "{}: {} > {}", c.name(), data.len(), bound);
        }
    }

    #[test]
    fn decompress_never_panics_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..2000)) {
        for c in codecs() {
            let mut out = Vec::new();
            let _ = c.decompress(&data, &mut out);
        }
    }

    #[test]
    fn decompress_never_panics_on_damaged_pages(
        page in page_strategy(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        for c in codecs() {
            let mut data = enc(c, &page);
            if data.is_empty() {
                continue;
            }
            for (at, x) in &flips {
                let i = at.index(data.len());
                data[i] ^= x;
            }
            let mut out = Vec::new();
            if c.decompress(&data, &mut out).is_ok() {
                // Whatever decodes must be reproducible from its own encoding.
                let again = dec(c, &enc(c, &out));
                prop_assert_eq!(again.as_deref(), Ok(&out[..]));
            }
            let _ = dec(c, &data[..cut.index(data.len())]);
        }
    }
}
