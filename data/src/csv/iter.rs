//! `CSVIter`: the consumer side. Batches are cut from the epoch's row stream as they are asked
//! for; the last-batch modes are applied when the stream runs out.

use std::sync::Arc;

use super::index::{check_same_rows, index_file};
use super::params::{CSVIterParams, OP};
use super::stream::{EpochStream, Source};
use super::values::Values;
use crate::batch::{Batch, LastBatch};
use crate::error::{DataError, Result};

/// Streaming CSV iterator yielding dense batches (`Iterator<Item = Result<Batch>>`), MXNet's
/// `CSVIter`.
///
/// Data batches are `[batch_size, data_shape...]`, label batches `[batch_size]` for the
/// default `label_shape` `[1]`, else `[batch_size, label_shape...]`, both of `dtype`. Malformed
/// input yields one `Err` naming the file, line and column, and ends the epoch (the batches
/// before it have been yielded); `reset` starts the next epoch.
///
/// Memory: the construction pass keeps two words per `block_rows` rows; an epoch holds one
/// block of parsed rows, the batch being filled, and for `Pad` / `RoundBatch` the few rows
/// read again to fill the last batch. Reading is synchronous, on the calling thread.
///
/// ```
/// use sparrow_data::csv::{CSVIter, CSVIterParams};
/// use sparrow_data::LastBatch;
/// let dir = std::env::temp_dir().join(format!("csv-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let (x, y) = (dir.join("x.csv"), dir.join("y.csv"));
/// std::fs::write(&x, "1,2\n3,4\n5,6\n").unwrap();
/// std::fs::write(&y, "0\n1\n0\n").unwrap();
/// let mut p = CSVIterParams::new(&x, &[2], 2);
/// p.label_csv = Some(y);
/// p.last_batch = LastBatch::Pad;
/// let batches: Vec<_> = CSVIter::new(p)?.collect::<Result<_, _>>()?;
/// assert_eq!(batches[1].data.to_vec::<f32>()?, vec![5.0, 6.0, 1.0, 2.0]);
/// assert_eq!(batches[1].pad, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CSVIter {
    src: Arc<Source>,
    epoch: u64,
    stream: Option<EpochStream>,
    /// Rows rolled over into this epoch (`RollOver`), taken first.
    carry: Option<(Values, Values, usize)>,
    /// Rows rolled over into the next epoch, once this one has run to its end.
    next_carry: Option<(Values, Values, usize)>,
    /// Rows of the next epoch the round batch of this one borrows (`RoundBatch`).
    next_skip: usize,
    /// Rows this epoch leaves out at its start (what the previous round batch borrowed).
    pending_skip: usize,
    done: bool,
}

impl CSVIter {
    /// Index the files (one streaming pass each: row counts, and the data and label files must
    /// agree), and prepare the first epoch.
    pub fn new(p: CSVIterParams) -> Result<Self> {
        p.validate()?;
        let (data_width, label_width) = p.widths()?;
        let data = index_file(&p.data_csv, p.block_rows)?;
        let label = match &p.label_csv {
            Some(l) => {
                let li = index_file(l, p.block_rows)?;
                check_same_rows(&data, &li, p.block_rows)?;
                Some(li)
            }
            None => None,
        };
        let n = data.rows as u128;
        let (k, parts) = (p.part_index as u128, p.num_parts as u128);
        let (r0, r1) = ((n * k / parts) as u64, (n * (k + 1) / parts) as u64);
        let rows = r1 - r0;
        let fills = matches!(p.last_batch, LastBatch::Pad | LastBatch::RoundBatch);
        if fills && rows > 0 && (p.batch_size as u64) > rows {
            return Err(DataError::arg(
                OP,
                format!(
                    "batch_size {} is larger than the {rows} rows of this part: a {:?} last batch \
                     could not be filled (use Keep or Discard, or a smaller batch)",
                    p.batch_size, p.last_batch
                ),
            ));
        }
        let src = Arc::new(Source {
            p,
            data,
            label,
            data_width,
            label_width,
            r0,
            r1,
        });
        let mut it = CSVIter {
            src,
            epoch: 0,
            stream: None,
            carry: None,
            next_carry: None,
            next_skip: 0,
            pending_skip: 0,
            done: false,
        };
        it.start(0);
        Ok(it)
    }

    /// The parameters.
    pub fn params(&self) -> &CSVIterParams {
        &self.src.p
    }

    /// Rows this part reads per epoch.
    pub fn num_rows(&self) -> u64 {
        self.src.rows()
    }

    /// Set up the current epoch, leaving out its first `skip` rows. The stream itself opens
    /// on the first `next`, so that its errors come out of the iterator.
    fn start(&mut self, skip: usize) {
        let bs = self.src.p.batch_size;
        let carried = self.carry.as_ref().map_or(0, |c| c.2) as u64;
        let total = carried + self.src.rows().saturating_sub(skip as u64);
        let rest = (total % bs as u64) as usize;
        self.next_skip = if self.src.p.last_batch == LastBatch::RoundBatch && rest > 0 {
            bs - rest
        } else {
            0
        };
        self.pending_skip = skip;
        self.stream = None;
        self.next_carry = None;
        self.done = false;
    }

    /// Start the next epoch (like MXNet's `reset`): with `RoundBatch` it begins after the rows
    /// the last batch borrowed, with `RollOver` it begins with the rows left over (only when
    /// the epoch ran to its end; a reset in the middle carries nothing over).
    pub fn reset(&mut self) {
        self.epoch += 1;
        self.carry = self.next_carry.take();
        let skip = self.next_skip;
        self.start(skip);
    }

    fn batch(&self, mut d: Values, mut l: Values, rows: usize, pad: usize) -> Result<Batch> {
        let p = &self.src.p;
        let mut dshape = vec![rows];
        dshape.extend_from_slice(&p.data_shape);
        let mut lshape = vec![rows];
        if p.label_shape != [1] {
            lshape.extend_from_slice(&p.label_shape);
        }
        Ok(Batch {
            data: d.take_array(&dshape)?,
            label: Some(l.take_array(&lshape)?),
            pad,
        })
    }

    fn next_batch(&mut self) -> Result<Option<Batch>> {
        let (bs, dtype) = (self.src.p.batch_size, self.src.p.dtype);
        if self.stream.is_none() {
            self.stream = Some(EpochStream::new(&self.src, self.epoch, self.pending_skip)?);
        }
        let (mut d, mut l, mut filled) = match self.carry.take() {
            Some(c) => c,
            None => (Values::new(dtype), Values::new(dtype), 0),
        };
        if let Some(st) = self.stream.as_mut() {
            filled += st.take(bs - filled, &mut d, &mut l)?;
        }
        if filled == bs {
            return Ok(Some(self.batch(d, l, bs, 0)?));
        }
        self.done = true;
        if filled == 0 {
            return Ok(None);
        }
        let need = bs - filled;
        match self.src.p.last_batch {
            LastBatch::Keep => Ok(Some(self.batch(d, l, filled, 0)?)),
            LastBatch::Discard => Ok(None),
            LastBatch::RollOver => {
                self.next_carry = Some((d, l, filled));
                Ok(None)
            }
            LastBatch::Pad | LastBatch::RoundBatch => {
                // Pad: the first rows of this epoch; RoundBatch: of the next one (which then
                // starts after them). `new` made sure one epoch holds `need` rows.
                let e = self.epoch + (self.src.p.last_batch == LastBatch::RoundBatch) as u64;
                let mut from = EpochStream::new(&self.src, e, 0)?;
                let got = from.take(need, &mut d, &mut l)?;
                debug_assert_eq!(got, need);
                Ok(Some(self.batch(d, l, bs, need)?))
            }
        }
    }
}

impl Iterator for CSVIter {
    type Item = Result<Batch>;
    fn next(&mut self) -> Option<Result<Batch>> {
        if self.done {
            return None;
        }
        match self.next_batch() {
            Ok(b) => b.map(Ok),
            Err(e) => {
                self.done = true;
                self.next_carry = None;
                Some(Err(e))
            }
        }
    }
}
