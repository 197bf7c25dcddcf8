//! NumPy's `.npy` header: what a memory-mapped array needs to find its elements in the file.
//!
//! Format (numpy.lib.format): the magic `\x93NUMPY`, a major and minor version byte, the
//! header length (u16 little-endian for version 1, u32 for versions 2 and 3), then a Python
//! dict literal `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }` padded with
//! spaces and a newline so that the elements start on a multiple of 64 bytes. Only what sparrow
//! arrays can hold is accepted: little-endian (or byte-sized) f32, f64, f16 (`<f2`), i64, i32
//! and u8, in C order. bfloat16 has no NumPy dtype, so a bf16 array has no `.npy` form (writers
//! refuse it with an error; safetensors stores it).

use crate::dtype::DType;

/// The parsed header of a `.npy` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Element type.
    pub dtype: DType,
    /// Shape (empty for a 0-d array).
    pub shape: Vec<usize>,
    /// Byte offset of the first element.
    pub data_offset: usize,
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// The `descr` string numpy writes for `dtype` (explicit little-endian); an error for bf16,
/// which NumPy has no dtype for.
pub fn descr(dtype: DType) -> Result<&'static str, String> {
    Ok(match dtype {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::U8 => "|u1",
        DType::F16 => "<f2",
        DType::BF16 => {
            return Err(
                "bfloat16 has no NumPy dtype, so no .npy form (cast it to float32, \
                        or save it as safetensors, which has BF16)"
                    .into(),
            )
        }
    })
}

fn parse_descr(s: &str) -> Result<DType, String> {
    Ok(match s {
        "<f4" => DType::F32,
        "<f8" => DType::F64,
        "<f2" => DType::F16,
        "<i8" => DType::I64,
        "<i4" => DType::I32,
        "|u1" | "<u1" | "u1" => DType::U8,
        other if other.starts_with('>') => {
            return Err(format!(
                "big-endian dtype '{other}' (sparrow reads little-endian)"
            ))
        }
        other => {
            return Err(format!(
                "dtype '{other}' not supported (f32, f64, f16, i64, i32 and u8 are)"
            ))
        }
    })
}

/// The value after `'key':` in the header dict, up to the next top-level comma or brace.
fn field<'a>(dict: &'a str, key: &str) -> Result<&'a str, String> {
    let tag = format!("'{key}':");
    let at = dict
        .find(&tag)
        .ok_or_else(|| format!("header has no '{key}'"))?;
    let rest = dict[at + tag.len()..].trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else {
        rest.find([',', '}'])
    }
    .ok_or_else(|| format!("header's '{key}' is not terminated"))?;
    Ok(rest[..end].trim())
}

/// A `.npy` header before its `descr` is mapped to a sparrow dtype: what a reader of members
/// that are not numeric arrays (the byte string `format.npy` of a SciPy sparse file) needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawNpyHeader {
    /// The `descr` string as written (`<f4`, `|S3`, ...).
    pub descr: String,
    /// Shape (empty for a 0-d array).
    pub shape: Vec<usize>,
    /// Byte offset of the first element.
    pub data_offset: usize,
}

/// Parse the header at the start of `bytes` without interpreting `descr` (C order only).
pub fn parse_raw_header(bytes: &[u8]) -> Result<RawNpyHeader, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("header cut short".into());
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(format!("unknown .npy version {v}")),
    };
    let end = start + len;
    let dict = bytes
        .get(start..end)
        .ok_or_else(|| format!("header of {len} bytes runs past the end of the file"))?;
    let dict = std::str::from_utf8(dict).map_err(|_| "header is not text".to_string())?;
    let descr = field(dict, "descr")?.trim_matches(['\'', '"']).to_string();
    match field(dict, "fortran_order")? {
        "False" => {}
        "True" => return Err("Fortran-order arrays are not supported (save C order)".into()),
        other => return Err(format!("bad fortran_order '{other}'")),
    }
    let s = field(dict, "shape")?;
    let inner = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("bad shape '{s}'"))?;
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.trim_end_matches('L').parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| format!("bad shape '{s}'"))?;
    Ok(RawNpyHeader {
        descr,
        shape,
        data_offset: end,
    })
}

/// Parse the header at the start of `bytes` (the whole file, or at least its header).
pub fn parse_header(bytes: &[u8]) -> Result<NpyHeader, String> {
    let raw = parse_raw_header(bytes)?;
    Ok(NpyHeader {
        dtype: parse_descr(&raw.descr)?,
        shape: raw.shape,
        data_offset: raw.data_offset,
    })
}

/// The header bytes of a version-1 `.npy` file for `shape` and `dtype`, padded so that the
/// elements start on a multiple of 64 bytes (what numpy writes; it also aligns every dtype).
/// Version 2 (a u32 length) when the header would not fit a u16, as numpy does.
///
/// An error for a dtype with no NumPy form (bf16, see [`descr`]).
pub fn header_bytes(shape: &[usize], dtype: DType) -> Result<Vec<u8>, String> {
    Ok(header_bytes_descr(shape, descr(dtype)?))
}

/// [`header_bytes`] for any `descr` string (`|S3` for the byte string SciPy stores as a sparse
/// file's `format`).
pub fn header_bytes_descr(shape: &[usize], descr: &str) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape_s = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_s}, }}");
    let build = |prefix: usize| {
        let unpadded = prefix + dict.len() + 1;
        let pad = (64 - unpadded % 64) % 64;
        let mut text = dict.clone().into_bytes();
        text.extend(std::iter::repeat_n(b' ', pad));
        text.push(b'\n');
        text
    };
    let text = build(10);
    let mut out = MAGIC.to_vec();
    if let Ok(len) = u16::try_from(text.len()) {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&text);
    } else {
        let text = build(12);
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_aligns() {
        for (shape, dtype) in [
            (vec![3usize, 4], DType::F32),
            (vec![7], DType::I64),
            (vec![], DType::U8),
            (vec![2, 3, 5], DType::F64),
            (vec![4, 2], DType::F16),
        ] {
            let h = header_bytes(&shape, dtype).unwrap();
            assert_eq!(h.len() % 64, 0);
            let p = parse_header(&h).unwrap();
            assert_eq!(p.dtype, dtype);
            assert_eq!(p.shape, shape);
            assert_eq!(p.data_offset, h.len());
        }
    }

    #[test]
    fn reads_numpy_written_headers_and_rejects_what_it_cannot_hold() {
        // Bytes as numpy 1.26 writes `np.save(f, np.zeros((2, 3), '<f4'))`.
        let mut h = b"\x93NUMPY\x01\x00v\x00".to_vec();
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        h.extend_from_slice(dict.as_bytes());
        h.extend(std::iter::repeat_n(b' ', 118 - dict.len() - 1));
        h.push(b'\n');
        let p = parse_header(&h).unwrap();
        assert_eq!(
            (p.dtype, p.shape, p.data_offset),
            (DType::F32, vec![2, 3], 128)
        );
        // `h` starts with the non-UTF-8 magic byte: replace within the bytes.
        let swap = |from: &str, to: &str| {
            let at = h
                .windows(from.len())
                .position(|w| w == from.as_bytes())
                .unwrap();
            let mut b = h.clone();
            b.splice(at..at + from.len(), to.bytes());
            b
        };
        let bad = |d: &str| parse_header(&swap("'<f4'", d)).unwrap_err();
        assert!(bad("'>f4'").contains("big-endian"));
        assert!(bad("'<c8'").contains("not supported"));
        assert!(parse_header(&swap("False", "True "))
            .unwrap_err()
            .contains("Fortran"));
        assert!(parse_header(b"PK\x03\x04 not npy")
            .unwrap_err()
            .contains("magic"));
        assert!(parse_header(&h[..40]).unwrap_err().contains("past the end"));
    }

    #[test]
    fn bf16_has_no_npy_form() {
        let e = header_bytes(&[2], DType::BF16).unwrap_err();
        assert!(e.contains("bfloat16"), "{e}");
    }
}
