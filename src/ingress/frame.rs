//! TCP framing: a 4-byte big-endian length, then that many bytes of JSON.
//! The decoder is push-based and pure, so it can be fuzzed: it never holds
//! more than one frame header plus `max` bytes, and refuses a frame that
//! announces more than `max` before reading its body.

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size} bytes exceeds the maximum of {max}")]
    TooLarge { size: usize, max: usize },
    #[error("empty frame")]
    Empty,
}

/// Prefixes `payload` with its length.
pub fn encode(payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("frames are far below 4 GiB");
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Reassembles frames from bytes as they arrive.
#[derive(Debug)]
pub struct FrameDecoder {
    max: usize,
    buffer: Vec<u8>,
}

impl FrameDecoder {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            buffer: Vec::new(),
        }
    }

    /// Changes the largest frame accepted from now on (a connection admits
    /// only a small frame until it has authenticated).
    pub fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    /// Appends received bytes. Call [`FrameDecoder::next_frame`] until it
    /// returns `Ok(None)` before pushing more, so the buffer stays bounded.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Bytes received that do not yet form a whole frame.
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }

    /// The next whole frame, `None` if more bytes are needed, or an error
    /// after which the connection must be closed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let Some(header) = self.buffer.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let size = usize::try_from(u32::from_be_bytes([
            header[0], header[1], header[2], header[3],
        ]))
        .unwrap_or(usize::MAX);
        if size == 0 {
            return Err(FrameError::Empty);
        }
        if size > self.max {
            return Err(FrameError::TooLarge {
                size,
                max: self.max,
            });
        }
        if self.buffer.len() < HEADER_LEN + size {
            return Ok(None);
        }
        let frame = self.buffer[HEADER_LEN..HEADER_LEN + size].to_vec();
        self.buffer.drain(..HEADER_LEN + size);
        if self.buffer.is_empty() && self.buffer.capacity() > 64 * 1024 {
            // Do not keep a large frame's allocation for an idle connection.
            self.buffer = Vec::new();
        }
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_split_anywhere_come_out_whole() {
        let mut decoder = FrameDecoder::new(64);
        let mut wire = encode(br#"{"op":"auth"}"#);
        wire.extend(encode(b"x"));
        for byte in &wire[..wire.len() - 1] {
            decoder.push(std::slice::from_ref(byte));
        }
        assert_eq!(
            decoder.next_frame().unwrap().as_deref(),
            Some(&br#"{"op":"auth"}"#[..])
        );
        assert_eq!(decoder.next_frame().unwrap(), None);
        decoder.push(&wire[wire.len() - 1..]);
        assert_eq!(decoder.next_frame().unwrap().as_deref(), Some(&b"x"[..]));
        assert_eq!(decoder.pending(), 0);
    }

    #[test]
    fn oversized_and_empty_frames_are_refused_before_their_body() {
        let mut decoder = FrameDecoder::new(8);
        decoder.push(&1_000_000u32.to_be_bytes());
        assert_eq!(
            decoder.next_frame(),
            Err(FrameError::TooLarge {
                size: 1_000_000,
                max: 8
            })
        );
        let mut decoder = FrameDecoder::new(8);
        decoder.push(&[0, 0, 0, 0]);
        assert_eq!(decoder.next_frame(), Err(FrameError::Empty));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        /// The fuzz target: arbitrary bytes in arbitrary pieces never panic,
        /// never yield a frame above the maximum, and never let the buffer
        /// grow past one header plus the maximum plus one piece.
        #[test]
        fn arbitrary_bytes_never_panic_or_overgrow(
            bytes in proptest::collection::vec(any::<u8>(), 0..4_096),
            cuts in proptest::collection::vec(1usize..512, 1..32),
            max in 1usize..1_024,
        ) {
            let mut decoder = FrameDecoder::new(max);
            let mut rest = &bytes[..];
            let mut cut = cuts.iter().cycle();
            'feed: while !rest.is_empty() {
                let take = (*cut.next().unwrap()).min(rest.len());
                decoder.push(&rest[..take]);
                rest = &rest[take..];
                loop {
                    match decoder.next_frame() {
                        Ok(Some(frame)) => prop_assert!(!frame.is_empty() && frame.len() <= max),
                        Ok(None) => break,
                        Err(_) => break 'feed,
                    }
                }
                prop_assert!(decoder.pending() <= HEADER_LEN + max + 512);
            }
        }

        /// Whatever is encoded decodes to the same frames, however it is cut.
        #[test]
        fn encoded_frames_round_trip(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..200), 0..20),
            piece in 1usize..64,
        ) {
            let wire: Vec<u8> = payloads.iter().flat_map(|payload| encode(payload)).collect();
            let mut decoder = FrameDecoder::new(200);
            let mut out = Vec::new();
            for chunk in wire.chunks(piece) {
                decoder.push(chunk);
                while let Some(frame) = decoder.next_frame().unwrap() {
                    out.push(frame);
                }
            }
            prop_assert_eq!(out, payloads);
        }
    }
}
