//! Count-min frequency sketch with the TinyLFU reset (periodic halving), used as the admission
//! filter of the composite (W-TinyLFU) strategy, plus the [`EntityHash`] trait that gives ids the
//! 32-bit hash code the sketch and the shard extractor use.

/// The 32-bit hash code of an entity id, as the JVM reference computes it (`String.hashCode` of
/// the id's string form). Used for the frequency sketch and for the simulator's shard extractor,
/// so that numeric ids reproduce the reference's results exactly.
pub trait EntityHash {
    /// Java-compatible `hashCode` of the id's string form.
    fn entity_hash(&self) -> i32;
}

/// Java `String.hashCode` over UTF-16 code units.
pub fn java_string_hash(s: &str) -> i32 {
    let mut h: i32 = 0;
    for unit in s.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    h
}

/// Java `String.hashCode` of the decimal form of `v` (no allocation).
pub fn java_decimal_hash(v: i64) -> i32 {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut x = v.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (x % 10) as u8;
        x /= 10;
        if x == 0 {
            break;
        }
    }
    let mut h: i32 = if v < 0 { b'-' as i32 } else { 0 };
    for &d in &buf[i..] {
        h = h.wrapping_mul(31).wrapping_add(d as i32);
    }
    h
}

/// Java `String.hashCode` of the decimal form of an unsigned value.
pub fn java_unsigned_hash(v: u64) -> i32 {
    if v <= i64::MAX as u64 {
        java_decimal_hash(v as i64)
    } else {
        java_string_hash(&v.to_string())
    }
}

impl EntityHash for String {
    fn entity_hash(&self) -> i32 {
        java_string_hash(self)
    }
}
impl EntityHash for std::sync::Arc<str> {
    fn entity_hash(&self) -> i32 {
        java_string_hash(self)
    }
}
impl EntityHash for &str {
    fn entity_hash(&self) -> i32 {
        java_string_hash(self)
    }
}
impl EntityHash for u64 {
    fn entity_hash(&self) -> i32 {
        java_unsigned_hash(*self)
    }
}
impl EntityHash for i64 {
    fn entity_hash(&self) -> i32 {
        java_decimal_hash(*self)
    }
}
impl EntityHash for u32 {
    fn entity_hash(&self) -> i32 {
        java_decimal_hash(*self as i64)
    }
}
impl EntityHash for i32 {
    fn entity_hash(&self) -> i32 {
        java_decimal_hash(*self as i64)
    }
}

/// Java `Integer.numberOfLeadingZeros`-based ceiling power of two, as the reference computes it
/// (capacity 0 and 1 both give 1).
pub fn ceiling_power_of_two(i: i32) -> i64 {
    let nlz = (i.wrapping_sub(1) as u32).leading_zeros();
    // Java: 1 << -nlz (shift distance taken mod 32)
    let shift = (32u32.wrapping_sub(nlz)) & 31;
    (1i32 << shift) as i64
}

/// Frequency sketch: either the fast fixed-shape variant (depth 4, 4-bit counters) or a general one.
#[derive(Debug, Clone)]
pub enum FrequencySketch {
    /// Depth 4, 4-bit counters, hash-prospector rehash with 4 seeds (the reference's fast sketch).
    Fast(FastSketch),
    /// Configurable depth and counter width.
    General(GeneralSketch),
}

impl FrequencySketch {
    /// Sketch for `capacity` entities: width = `width_multiplier * ceil_pow2(capacity)` counters per
    /// row, reset after `reset_multiplier * capacity` increments.
    pub fn new(
        capacity: usize,
        width_multiplier: u32,
        reset_multiplier: f64,
        depth: u32,
        counter_bits: u32,
    ) -> Self {
        let cap = capacity.min(i32::MAX as usize) as i32;
        let width = (width_multiplier as i64 * ceiling_power_of_two(cap)).max(1) as u64;
        let reset_size = (reset_multiplier * capacity as f64) as u64;
        if depth == 4 && counter_bits == 4 {
            FrequencySketch::Fast(FastSketch::new(width, reset_size))
        } else {
            FrequencySketch::General(GeneralSketch::new(depth, width, counter_bits, reset_size))
        }
    }

    /// Count one occurrence of the element with hash code `hash`.
    #[inline]
    pub fn increment(&mut self, hash: i32) {
        match self {
            FrequencySketch::Fast(s) => s.increment(hash),
            FrequencySketch::General(s) => s.increment(hash),
        }
    }

    /// Estimated frequency of the element with hash code `hash`.
    #[inline]
    pub fn frequency(&self, hash: i32) -> u32 {
        match self {
            FrequencySketch::Fast(s) => s.frequency(hash),
            FrequencySketch::General(s) => s.frequency(hash),
        }
    }

    /// Number of counted increments since the last reset adjustment.
    pub fn size(&self) -> u64 {
        match self {
            FrequencySketch::Fast(s) => s.size,
            FrequencySketch::General(s) => s.size,
        }
    }

    /// Bytes of counter storage.
    pub fn memory_bytes(&self) -> usize {
        match self {
            FrequencySketch::Fast(s) => s.matrix.len() * 8,
            FrequencySketch::General(s) => s.matrix.iter().map(|r| r.len() * 8).sum(),
        }
    }
}

const SEEDS: [u64; 4] = [
    0xC3A5C85C97CB3127,
    0xB492B66FBE98F273,
    0x9AE16A3B2F90404F,
    0xCBF29CE484222325,
];

/// Depth-4, 4-bit-counter sketch (16 counters per `u64`).
#[derive(Debug, Clone)]
pub struct FastSketch {
    row_width: usize,
    index_mask: u64,
    matrix: Vec<u64>,
    row_sizes: [u64; 4],
    size: u64,
    reset_size: u64,
}

impl FastSketch {
    fn new(width: u64, reset_size: u64) -> Self {
        assert!(width.is_power_of_two(), "width must be a power of two");
        let row_width = ((width >> 4) as usize).max(1);
        FastSketch {
            row_width,
            index_mask: width - 1,
            matrix: vec![0; row_width * 4],
            row_sizes: [0; 4],
            size: 0,
            reset_size,
        }
    }

    #[inline]
    fn rehash(hash: i32) -> u32 {
        let mut x = hash as u32;
        x = ((x >> 15) ^ x).wrapping_mul(0xD168AAAD);
        x = ((x >> 15) ^ x).wrapping_mul(0xAF723597);
        (x >> 15) ^ x
    }

    #[inline]
    fn index(&self, hash: u32, seed: u64) -> u64 {
        // the hash is sign-extended to a long before adding the seed
        let h = hash as i32 as i64 as u64;
        let x = h.wrapping_add(seed).wrapping_mul(seed);
        (x.wrapping_add(x >> 32) as u32 as u64) & self.index_mask
    }

    #[inline]
    fn counter(&self, row: usize, index: u64) -> u32 {
        let column = (index >> 4) as usize;
        let slot = (index & 15) << 2;
        ((self.matrix[row * self.row_width + column] >> slot) & 0xF) as u32
    }

    #[inline]
    fn increment_counter(&mut self, row: usize, index: u64) -> bool {
        let column = (index >> 4) as usize;
        let slot = (index & 15) << 2;
        let mask = 0xFu64 << slot;
        let cell = &mut self.matrix[row * self.row_width + column];
        if *cell & mask != mask {
            *cell += 1u64 << slot;
            self.row_sizes[row] += 1;
            true
        } else {
            false
        }
    }

    fn increment(&mut self, hash: i32) {
        let h = Self::rehash(hash);
        let mut updated = false;
        for (row, seed) in SEEDS.iter().enumerate() {
            let index = self.index(h, *seed);
            updated |= self.increment_counter(row, index);
        }
        if updated {
            self.size += 1;
            if self.size == self.reset_size {
                self.reset();
            }
        }
    }

    fn frequency(&self, hash: i32) -> u32 {
        let h = Self::rehash(hash);
        SEEDS
            .iter()
            .enumerate()
            .map(|(row, seed)| self.counter(row, self.index(h, *seed)))
            .min()
            .unwrap_or(0)
    }

    fn reset(&mut self) {
        for row in 0..4 {
            let mut odd = 0u64;
            for cell in &mut self.matrix[row * self.row_width..(row + 1) * self.row_width] {
                odd += (*cell & 0x1111111111111111).count_ones() as u64;
                *cell = (*cell >> 1) & 0x7777777777777777;
            }
            self.row_sizes[row] = (self.row_sizes[row].wrapping_sub(odd) & 0xFFFF_FFFF) >> 1;
        }
        self.size = *self.row_sizes.iter().max().unwrap_or(&0);
    }
}

/// General count-min sketch: `depth` rows of `width` counters of `counter_bits` bits, row indices
/// derived as `h1 + i * h2` from the element hash and a murmur-style rehash of it.
#[derive(Debug, Clone)]
pub struct GeneralSketch {
    depth: usize,
    counter_bits: u32,
    slots: u64,
    column_mask: u64,
    counter_mask: u64,
    odd_mask: u64,
    reset_mask: u64,
    matrix: Vec<Vec<u64>>,
    row_sizes: Vec<u64>,
    size: u64,
    reset_size: u64,
}

impl GeneralSketch {
    fn new(depth: u32, width: u64, counter_bits: u32, reset_size: u64) -> Self {
        assert!(width.is_power_of_two(), "width must be a power of two");
        assert!(
            matches!(counter_bits, 2 | 4 | 8 | 16 | 32 | 64),
            "counter bits must be 2, 4, 8, 16, 32 or 64"
        );
        let slots = 64 / counter_bits as u64;
        let row_width = ((width / slots) as usize).max(1);
        let counter_mask = if counter_bits == 64 {
            i64::MAX as u64
        } else {
            (1u64 << counter_bits) - 1
        };
        let mut odd_mask = 0u64;
        let mut reset_mask = 0u64;
        for s in 0..slots {
            let shift = s * counter_bits as u64;
            odd_mask |= 1u64 << shift;
            reset_mask |= (counter_mask >> 1) << shift;
        }
        GeneralSketch {
            depth: depth as usize,
            counter_bits,
            slots,
            column_mask: width - 1,
            counter_mask,
            odd_mask,
            reset_mask,
            matrix: vec![vec![0; row_width]; depth as usize],
            row_sizes: vec![0; depth as usize],
            size: 0,
            reset_size,
        }
    }

    fn rehash(hash: i32) -> i32 {
        // murmur3 fmix32 finalizer
        let mut h = hash as u32;
        h ^= h >> 16;
        h = h.wrapping_mul(0x85EBCA6B);
        h ^= h >> 13;
        h = h.wrapping_mul(0xC2B2AE35);
        h ^= h >> 16;
        h as i32
    }

    fn position(&self, hash: i32) -> (usize, u32) {
        let h = hash as u32 as u64;
        let index = h & self.column_mask;
        let column = (index / self.slots) as usize;
        let slot = ((index % self.slots) as u32) * self.counter_bits;
        (column, slot)
    }

    fn increment(&mut self, hash: i32) {
        let h2 = Self::rehash(hash);
        let mut updated = false;
        for row in 0..self.depth {
            let (column, slot) = self.position(hash.wrapping_add((row as i32).wrapping_mul(h2)));
            let mask = self.counter_mask << slot;
            let cell = &mut self.matrix[row][column];
            if *cell & mask != mask {
                *cell = cell.wrapping_add(1u64 << slot);
                self.row_sizes[row] += 1;
                updated = true;
            }
        }
        if updated {
            self.size += 1;
            if self.size == self.reset_size {
                self.reset();
            }
        }
    }

    fn frequency(&self, hash: i32) -> u32 {
        let h2 = Self::rehash(hash);
        (0..self.depth)
            .map(|row| {
                let (column, slot) =
                    self.position(hash.wrapping_add((row as i32).wrapping_mul(h2)));
                ((self.matrix[row][column] >> slot) & self.counter_mask).min(u32::MAX as u64) as u32
            })
            .min()
            .unwrap_or(0)
    }

    fn reset(&mut self) {
        for row in 0..self.depth {
            let mut odd = 0u64;
            for cell in &mut self.matrix[row] {
                odd += (*cell & self.odd_mask).count_ones() as u64;
                *cell = (*cell >> 1) & self.reset_mask;
            }
            self.row_sizes[row] = self.row_sizes[row].saturating_sub(odd) >> 1;
        }
        self.size = self.row_sizes.iter().copied().max().unwrap_or(0);
    }
}

/// Hill-climbing optimizer for the admission window proportion.
#[derive(Debug, Clone)]
pub struct HillClimbing {
    adjust_multiplier: f64,
    initial_step: f64,
    restart_threshold: f64,
    step_decay: f64,
    adjust_size: f64,
    accesses: u64,
    active_accesses: u64,
    previous_active_rate: f64,
    next_step: f64,
}

impl HillClimbing {
    /// Optimizer for an initial limit (the reference passes the per-region limit first).
    pub fn new(
        initial_limit: usize,
        adjust_multiplier: f64,
        initial_step: f64,
        restart_threshold: f64,
        step_decay: f64,
    ) -> Self {
        HillClimbing {
            adjust_multiplier,
            initial_step,
            restart_threshold,
            step_decay,
            adjust_size: adjust_multiplier * initial_limit as f64,
            accesses: 0,
            active_accesses: 0,
            previous_active_rate: 0.0,
            next_step: -initial_step,
        }
    }

    /// An access to an already active entity.
    pub fn record_active(&mut self) {
        self.accesses += 1;
        self.active_accesses += 1;
    }

    /// An access that activated an entity.
    pub fn record_passive(&mut self) {
        self.accesses += 1;
    }

    /// The per-shard limit changed.
    pub fn update_limit(&mut self, limit: usize) {
        self.adjust_size = self.adjust_multiplier * limit as f64;
    }

    /// The next step that will be taken if the active rate does not drop.
    pub fn next_step(&self) -> f64 {
        self.next_step
    }

    /// Every `adjust_multiplier * limit` accesses: an adjustment of the window proportion
    /// (positive grows the window), otherwise 0.
    pub fn calculate_adjustment(&mut self) -> f64 {
        if self.accesses as f64 >= self.adjust_size {
            let rate = self.active_accesses as f64 / self.accesses as f64;
            let delta = rate - self.previous_active_rate;
            let adjustment = if delta >= 0.0 {
                self.next_step
            } else {
                -self.next_step
            };
            let direction = if adjustment >= 0.0 { 1.0 } else { -1.0 };
            self.next_step = if delta.abs() >= self.restart_threshold {
                self.initial_step * direction
            } else {
                adjustment * self.step_decay
            };
            self.previous_active_rate = rate;
            self.accesses = 0;
            self.active_accesses = 0;
            adjustment
        } else {
            0.0
        }
    }
}
