//! The `.npz` side of [`crate::io`]: a zip of `.npy` members as `np.savez` writes, sparse
//! arrays in SciPy's `save_npz` member layout (csr as csr, row_sparse as bsr with one-row
//! blocks), CRC-32 and local-header names checked on read.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::{Cursor, Read, Write};
use std::path::Path;

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::{Component, Parts, OP_LOAD, OP_SAVE};
use crate::npy;
use crate::{Error, NDArray, Result};

/// Deflate cannot expand data by more than about 1032 to 1: a member whose declared size is
/// larger than that times its compressed size is corrupt (and must not size an allocation).
const MAX_DEFLATE_RATIO: u64 = 1032;

/// One `.npy` member to write: its key (the name without `.npy`), header and elements.
struct Member<'a> {
    key: String,
    header: Vec<u8>,
    body: Cow<'a, [u8]>,
}

fn numeric<'a>(key: String, c: &'a Component) -> std::result::Result<Member<'a>, String> {
    Ok(Member {
        header: npy::header_bytes(&c.shape, c.dtype).map_err(|e| format!("'{key}': {e}"))?,
        key,
        body: Cow::Borrowed(&c.bytes),
    })
}

fn ids(key: String, v: &[i64]) -> Member<'static> {
    Member {
        key,
        header: npy::header_bytes_descr(&[v.len()], "<i8"),
        body: Cow::Owned(v.iter().flat_map(|i| i.to_le_bytes()).collect()),
    }
}

/// A 0-d byte string (`np.array(b'csr')`, dtype `|S3`), as SciPy stores `format`.
fn text(key: String, s: &str) -> Member<'static> {
    Member {
        key,
        header: npy::header_bytes_descr(&[], &format!("|S{}", s.len())),
        body: Cow::Owned(s.as_bytes().to_vec()),
    }
}

/// The members of one array, sparse ones under `prefix` (`NAME/`, or empty for SciPy's
/// single-array file), in the order `scipy.sparse.save_npz` writes them.
fn members_of<'a>(
    name: &str,
    prefix: &str,
    p: &'a Parts,
) -> std::result::Result<Vec<Member<'a>>, String> {
    let key = |c: &str| format!("{prefix}{c}");
    Ok(match p {
        Parts::Dense(c) => vec![numeric(name.to_string(), c)?],
        Parts::Csr {
            shape,
            data,
            indices,
            indptr,
        } => vec![
            ids(key("indices"), indices),
            ids(key("indptr"), indptr),
            text(key("format"), "csr"),
            ids(key("shape"), &[shape[0] as i64, shape[1] as i64]),
            numeric(key("data"), data)?,
        ],
        Parts::RowSparse {
            shape,
            data,
            indices,
        } => {
            // bsr with blocks of one full row: block-column 0 for every block, and row r
            // holds a block when indptr steps at r.
            let rows = shape[0];
            let width: usize = shape[1..].iter().product();
            let mut indptr = Vec::with_capacity(rows + 1);
            indptr.push(0i64);
            let mut next = indices.iter().peekable();
            for r in 0..rows {
                let stored = next.next_if(|&&i| i == r as i64).is_some();
                indptr.push(indptr[r] + stored as i64);
            }
            let block = Component {
                dtype: data.dtype,
                shape: vec![indices.len(), 1, width],
                bytes: Vec::new(),
            };
            let mut m = vec![
                ids(key("indices"), &vec![0; indices.len()]),
                ids(key("indptr"), &indptr),
                text(key("format"), "bsr"),
                ids(key("shape"), &[rows as i64, width as i64]),
                Member {
                    key: key("data"),
                    header: npy::header_bytes(&block.shape, block.dtype)
                        .map_err(|e| format!("'{}': {e}", key("data")))?,
                    body: Cow::Borrowed(&data.bytes),
                },
            ];
            if shape.len() != 2 {
                let full: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                m.push(ids(key("sparrow_shape"), &full));
            }
            m
        }
    })
}

/// Write `arrays` to `path` atomically. `list`: the arrays are a list, and a list of one
/// sparse array is written without a prefix (SciPy's `save_npz` file).
pub(super) fn write(
    path: &Path,
    arrays: &[(String, Parts)],
    list: bool,
    deflate: bool,
) -> Result<()> {
    let fail = |m: String| Error::file(OP_SAVE, path, m);
    let scipy_single = list && arrays.len() == 1 && arrays[0].1.stype() != crate::SType::Dense;
    let mut members = Vec::new();
    for (name, p) in arrays {
        if !scipy_single
            && matches!(p, Parts::Dense(_))
            && (name == "format" || name.ends_with("/format"))
        {
            return Err(fail(format!(
                "a dense array cannot be named '{name}' in an .npz (a member NAME/format marks \
                 a sparse array NAME)"
            )));
        }
        let prefix = if scipy_single {
            String::new()
        } else {
            format!("{name}/")
        };
        members.extend(members_of(name, &prefix, p).map_err(&fail)?);
    }
    let mut seen = HashSet::new();
    for m in &members {
        if !seen.insert(m.key.as_str()) {
            return Err(fail(format!(
                "two arrays store a member named '{}.npy' (a sparse array NAME stores \
                 NAME/data, NAME/indices, ...: rename one)",
                m.key
            )));
        }
    }
    let method = if deflate {
        CompressionMethod::Deflated
    } else {
        CompressionMethod::Stored
    };
    crate::fsio::write_atomic(path, |w| {
        let mut z = ZipWriter::new(w);
        for m in &members {
            let len = (m.header.len() + m.body.len()) as u64;
            let opts = SimpleFileOptions::default()
                .compression_method(method)
                .large_file(len >= u32::MAX as u64);
            z.start_file(format!("{}.npy", m.key), opts)
                .map_err(std::io::Error::other)?;
            z.write_all(&m.header)?;
            z.write_all(&m.body)?;
        }
        z.finish().map_err(std::io::Error::other)?;
        Ok(())
    })
    .map_err(|e| fail(format!("cannot write: {e}")))
}

/// The name stored in the local file header at byte `at` of the archive, if one is there.
fn local_name(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let h = bytes.get(at..at.checked_add(30)?)?;
    if &h[..4] != b"PK\x03\x04" {
        return None;
    }
    let n = u16::from_le_bytes([h[26], h[27]]) as usize;
    bytes.get(at + 30..at + 30 + n)
}

/// Every member of the archive as (key, bytes), in archive order, each checked: a `.npy`
/// name, the same name in the local header as in the central directory, the declared size,
/// and the CRC-32 (verified by the zip reader when a member is read to its end).
fn members(bytes: &[u8]) -> std::result::Result<Vec<(String, Vec<u8>)>, String> {
    let mut z = ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| format!("not a valid .npz (zip) file (truncated or corrupted?): {e}"))?;
    let mut out = Vec::with_capacity(z.len());
    let mut keys = HashSet::new();
    for i in 0..z.len() {
        let mut f = z
            .by_index(i)
            .map_err(|e| format!("zip member {i}: {e} (file corrupted?)"))?;
        let raw = f.name_raw().to_vec();
        let name = String::from_utf8(raw.clone())
            .map_err(|_| format!("zip member {i}: its name is not UTF-8"))?;
        if local_name(bytes, f.header_start() as usize) != Some(&raw[..]) {
            return Err(format!(
                "member '{name}': its local header does not match the central directory \
                 (file corrupted)"
            ));
        }
        let key = name
            .strip_suffix(".npy")
            .filter(|k| !k.is_empty())
            .ok_or_else(|| format!("member '{name}' is not a .npy array"))?
            .to_string();
        let (size, csize) = (f.size(), f.compressed_size());
        let plausible = match f.compression() {
            CompressionMethod::Stored => size == csize,
            CompressionMethod::Deflated => {
                size <= csize.saturating_mul(MAX_DEFLATE_RATIO).saturating_add(1024)
            }
            other => {
                return Err(format!(
                    "member '{name}': compression {other:?} is not supported (stored or deflate)"
                ))
            }
        };
        if !plausible {
            return Err(format!(
                "member '{name}': declared size {size} does not fit its {csize} stored bytes \
                 (file corrupted)"
            ));
        }
        let mut data = Vec::with_capacity(size.min(csize.saturating_mul(4)) as usize);
        // One byte past the declared size: the zip reader checks the CRC-32 when it reaches
        // the member's end, and a member longer than declared is caught below.
        (&mut f)
            .take(size.saturating_add(1))
            .read_to_end(&mut data)
            .map_err(|e| format!("member '{name}': {e} (file corrupted)"))?;
        if data.len() as u64 != size {
            return Err(format!(
                "member '{name}' holds {} bytes, its header says {size} (file corrupted)",
                data.len()
            ));
        }
        if !keys.insert(key.clone()) {
            return Err(format!("member '{name}' appears twice"));
        }
        out.push((key, data));
    }
    Ok(out)
}

/// A numeric `.npy` member as a component.
fn component(key: &str, bytes: &[u8]) -> std::result::Result<Component, String> {
    let what = |m: String| format!("member '{key}.npy': {m}");
    let h = npy::parse_header(bytes).map_err(what)?;
    let n = h
        .shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .and_then(|n| n.checked_mul(h.dtype.size_of()));
    let body = &bytes[h.data_offset..];
    if n != Some(body.len()) {
        return Err(what(format!(
            "{} bytes of elements cannot hold shape {:?} of {}",
            body.len(),
            h.shape,
            h.dtype.name()
        )));
    }
    Ok(Component {
        dtype: h.dtype,
        shape: h.shape,
        bytes: body.to_vec(),
    })
}

/// A 0-d string `.npy` member (`|S` bytes or `<U` UTF-32, as NumPy stores `b'csr'` / `'csr'`).
fn text_of(key: &str, bytes: &[u8]) -> std::result::Result<String, String> {
    let what = |m: String| format!("member '{key}.npy': {m}");
    let h = npy::parse_raw_header(bytes).map_err(what)?;
    if !h.shape.is_empty() {
        return Err(what(format!(
            "expected a 0-d string, has shape {:?}",
            h.shape
        )));
    }
    let body = &bytes[h.data_offset..];
    let d = h.descr.trim_start_matches(['|', '<', '=']);
    let s = if let Some(n) = d.strip_prefix('S').and_then(|n| n.parse::<usize>().ok()) {
        let b = body
            .get(..n)
            .ok_or_else(|| what("string cut short".into()))?;
        String::from_utf8_lossy(b)
            .trim_end_matches('\0')
            .to_string()
    } else if let Some(n) = d.strip_prefix('U').and_then(|n| n.parse::<usize>().ok()) {
        let b = body
            .get(..n.saturating_mul(4))
            .ok_or_else(|| what("string cut short".into()))?;
        b.chunks_exact(4)
            .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('?'))
            .collect::<String>()
            .trim_end_matches('\0')
            .to_string()
    } else {
        return Err(what(format!("expected a string, has dtype '{}'", h.descr)));
    };
    Ok(s)
}

/// The members of a sparse array, by component name (`data`, `indptr`, ...).
type Group<'a> = HashMap<&'a str, &'a [u8]>;

/// Components a sparse array's members may have (`_is_array` is SciPy's marker for a sparse
/// array rather than a matrix; `sparrow_shape` the shape of a row_sparse array not 2-D).
const COMPONENTS: [&str; 7] = [
    "data",
    "indices",
    "indptr",
    "format",
    "shape",
    "_is_array",
    "sparrow_shape",
];

/// The parts of the sparse array whose members are `g`, keys prefixed by `prefix`.
fn sparse_parts(prefix: &str, g: &Group<'_>) -> std::result::Result<Parts, String> {
    let key = |c: &str| format!("{prefix}{c}");
    let get = |c: &str| {
        g.get(c)
            .copied()
            .ok_or_else(|| format!("member '{}.npy' is missing", key(c)))
    };
    let comp = |c: &str| component(&key(c), get(c)?);
    let ids = |c: &str| comp(c)?.to_ids(&format!("member '{}.npy'", key(c)));
    let format = text_of(&key("format"), get("format")?)?;
    let dims = ids("shape")?;
    let [rows, cols] = dims[..] else {
        return Err(format!(
            "member '{}.npy' holds {dims:?}, expected 2 sizes",
            key("shape")
        ));
    };
    let (Ok(rows), Ok(cols)) = (usize::try_from(rows), usize::try_from(cols)) else {
        return Err(format!("member '{}.npy' holds {dims:?}", key("shape")));
    };
    let allowed: &[&str] = match format.as_str() {
        "csr" => &COMPONENTS[..6],
        "bsr" => &COMPONENTS,
        other => {
            return Err(format!(
                "sparse format '{other}' is not supported (sparrow reads csr, and bsr with \
                 blocksize (1, ncols) as row_sparse)"
            ))
        }
    };
    if let Some(extra) = g.keys().find(|c| !allowed.contains(c)) {
        return Err(format!("unexpected member '{}.npy'", key(extra)));
    }
    if format == "csr" {
        return Ok(Parts::Csr {
            shape: [rows, cols],
            data: comp("data")?,
            indices: ids("indices")?,
            indptr: ids("indptr")?,
        });
    }
    // bsr with one-row blocks: a row_sparse array.
    let mut data = comp("data")?;
    let &[k, 1, width] = &data.shape[..] else {
        return Err(format!(
            "member '{}.npy' has shape {:?}: only bsr with blocksize (1, ncols) is read (as \
             row_sparse)",
            key("data"),
            data.shape
        ));
    };
    if width != cols {
        return Err(format!(
            "bsr blocksize (1, {width}) is not a full row of shape ({rows}, {cols}): only \
             blocksize (1, ncols) is read (as row_sparse)"
        ));
    }
    let blocks = ids("indices")?;
    if blocks.len() != k || blocks.iter().any(|&b| b != 0) {
        return Err(format!(
            "member '{}.npy' must hold {k} zeros (one block-column per row)",
            key("indices")
        ));
    }
    let indptr = ids("indptr")?;
    if indptr.len() != rows.saturating_add(1) || indptr[0] != 0 || indptr[rows] != k as i64 {
        return Err(format!(
            "member '{}.npy' must have {} entries from 0 to {k}",
            key("indptr"),
            rows.saturating_add(1)
        ));
    }
    let mut row_ids = Vec::with_capacity(k);
    for (r, w) in indptr.windows(2).enumerate() {
        match w[1].checked_sub(w[0]) {
            Some(0) => {}
            Some(1) => row_ids.push(r as i64),
            _ => {
                return Err(format!(
                    "member '{}.npy': row {r} spans {}..{} (0 or 1 block per row with \
                     blocksize (1, ncols))",
                    key("indptr"),
                    w[0],
                    w[1]
                ))
            }
        }
    }
    let shape = match g.get("sparrow_shape") {
        None => vec![rows, cols],
        Some(_) => {
            let full = ids("sparrow_shape")?;
            let full: Vec<usize> = full
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Option<_>>()
                .ok_or_else(|| format!("member '{}.npy' holds {full:?}", key("sparrow_shape")))?;
            let w = full
                .get(1..)
                .unwrap_or(&[])
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d));
            if full.first() != Some(&rows) || w != Some(cols) {
                return Err(format!(
                    "member '{}.npy' holds {full:?}, which does not match shape ({rows}, {cols})",
                    key("sparrow_shape")
                ));
            }
            full
        }
    };
    let mut dshape = shape.clone();
    dshape[0] = k;
    data.shape = dshape;
    Ok(Parts::RowSparse {
        shape,
        data,
        indices: row_ids,
    })
}

/// Read the arrays of the `.npz` file at `path`.
pub(super) fn read(path: &Path) -> Result<Vec<(String, NDArray)>> {
    let bad = |m: String| Error::file(OP_LOAD, path, m);
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let members = members(&bytes).map_err(bad)?;
    let build = |name: &str, p: std::result::Result<Parts, String>| {
        p.and_then(Parts::into_array)
            .map_err(|m| bad(format!("array '{name}': {m}")))
    };
    // SciPy's single-array file: the members without a prefix.
    if members.iter().any(|(k, _)| k == "format") {
        let g: Group<'_> = members.iter().map(|(k, b)| (k.as_str(), &b[..])).collect();
        let name = super::list_name(0);
        let a = build(&name, sparse_parts("", &g))?;
        return Ok(vec![(name, a)]);
    }
    let sparse: HashSet<&str> = members
        .iter()
        .filter_map(|(k, _)| k.strip_suffix("/format"))
        .collect();
    // Each array at the position of its first member.
    let mut order: Vec<&str> = Vec::new();
    let mut groups: HashMap<&str, Group<'_>> = HashMap::new();
    let mut dense: HashMap<&str, &[u8]> = HashMap::new();
    for (k, b) in &members {
        match k.rsplit_once('/') {
            Some((p, c)) if sparse.contains(p) && COMPONENTS.contains(&c) => {
                let g = groups.entry(p).or_default();
                if g.is_empty() {
                    order.push(p);
                }
                g.insert(c, b);
            }
            _ => {
                if sparse.contains(k.as_str()) {
                    return Err(bad(format!(
                        "member '{k}.npy' and the sparse array '{k}' share a name"
                    )));
                }
                order.push(k);
                dense.insert(k, b);
            }
        }
    }
    let mut out = Vec::with_capacity(order.len());
    for name in order {
        let p = match dense.get(name) {
            Some(b) => component(name, b).map(Parts::Dense),
            None => sparse_parts(&format!("{name}/"), &groups[name]),
        };
        out.push((name.to_string(), build(name, p)?));
    }
    Ok(out)
}
