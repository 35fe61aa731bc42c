//! Image token costs (DESIGN.md section 3): by pixel size when it is known, from the
//! part's explicit `width`/`height` or from the header of inline base64 data, and a
//! documented constant when it is not (a remote URL, a format we do not read). Never by
//! the length of the base64 text, never 0.
//!
//! Which provider's rule applies is decided by the part's shape, which the canonical model
//! keeps in `source` ([`Shape`]): the OpenAI adapter stores the `image_url.url` string, the
//! Anthropic adapter the `source` object. A part with neither (a hand-built
//! `ImagePart(width=..., height=...)`) costs the larger of the two rules, so the estimate
//! never undercounts whichever provider receives it.
//!
//! Reading dimensions decodes only the base64 quanta that hold the header bytes: a PNG,
//! GIF or WebP costs a few quanta, a JPEG a few per segment it walks past (EXIF, ICC and
//! thumbnails are skipped by their length fields, not decoded). Everything is integer
//! arithmetic so that `contextwindow._image` (the pure-Python mirror) agrees exactly.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::model::Part;

/// Image cost model of a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageModel {
    /// Every image costs the same, whatever its size.
    Fixed(u64),
    /// The provider's rule for the part's [`Shape`]: OpenAI tiles ([`openai_tokens`]),
    /// Anthropic's pixel formula ([`anthropic_tokens`]), the larger of the two when the
    /// shape is unknown; [`OPENAI_UNKNOWN`] / [`ANTHROPIC_UNKNOWN`] when the size is.
    Provider,
}

/// Provider shape of an image part, read from its `source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `source` is a string: an OpenAI `image_url.url` (URL or data URL).
    OpenAI,
    /// `source` is an object: an Anthropic `source` (`base64`, `url`, `file` ...).
    Anthropic,
    /// No `source`, or a JSON value of another type.
    Unknown,
}

/// OpenAI's cost of a `detail: "low"` image, whatever its size (tokens).
pub const OPENAI_LOW: u64 = 85;

/// OpenAI cost of a high/auto-detail image of unknown size (tokens): the most the tile
/// rule can give. After fitting 2048x2048 and scaling the short side to 768 an image is at
/// most 768x2048 pixels, 2x4 tiles of 512: 85 + 170 * 8 = 1445. A typical 1024x1024 image
/// costs 765, so this overcounts it; it never undercounts (source: OpenAI vision guide,
/// "Calculating costs", platform.openai.com/docs/guides/vision).
pub const OPENAI_UNKNOWN: u64 = 1445;

/// Anthropic's ceiling on the pixels of an image that is not downscaled: 784x1568, the
/// largest entry (1:2) of the table of maximum image sizes that "will not be resized" in
/// Anthropic's vision guide (docs.anthropic.com/en/docs/vision, "Evaluate image size").
/// The guide's prose says "more than ~1,600 tokens" (1,200,000 px); the table's 3:4, 2:3
/// and 1:2 entries exceed that, so the ceiling is the table's, which never undercounts
/// them.
pub const ANTHROPIC_MAX_PIXELS: u64 = 784 * 1568;

/// Anthropic's long-edge limit (pixels) before its downscale (same guide: "If your image's
/// long edge is more than 1568 pixels ... it will first be scaled down, preserving aspect
/// ratio").
pub const ANTHROPIC_MAX_EDGE: u64 = 1568;

/// Anthropic pixels per token: `tokens = (width px * height px) / 750` (same guide,
/// "Calculate image costs").
pub const ANTHROPIC_PIXELS_PER_TOKEN: u64 = 750;

/// Anthropic cost of an image of unknown size (tokens): the most [`anthropic_tokens`] can
/// give, ceil(784 * 1568 / 750) = 1640.
pub const ANTHROPIC_UNKNOWN: u64 = ANTHROPIC_MAX_PIXELS.div_ceil(ANTHROPIC_PIXELS_PER_TOKEN);

/// OpenAI tokens of an image of `w` x `h` pixels (both at least 1).
///
/// `detail: "low"` costs 85. Otherwise (`"high"`, `"auto"`, absent, anything else) the image
/// is scaled to fit 2048x2048, then its short side down to 768 (integer division, never
/// below 1 pixel; images are never scaled up), and costs 85 + 170 per 512-pixel tile.
/// Source: OpenAI vision guide, "Calculating costs" (1024x1024 high: 765; 2048x4096 high:
/// 1105; 4096x8192 low: 85).
///
/// ```
/// use contextwindow_core::image::openai_tokens;
/// assert_eq!(openai_tokens(1024, 1024, None), 765);
/// assert_eq!(openai_tokens(2048, 4096, Some("high")), 1105);
/// assert_eq!(openai_tokens(4096, 8192, Some("low")), 85);
/// ```
pub fn openai_tokens(w: u64, h: u64, detail: Option<&str>) -> u64 {
    if detail == Some("low") {
        return OPENAI_LOW;
    }
    let (mut w, mut h) = (u128::from(w), u128::from(h));
    let longest = w.max(h);
    if longest > 2048 {
        w = (w * 2048 / longest).max(1);
        h = (h * 2048 / longest).max(1);
    }
    let shortest = w.min(h);
    if shortest > 768 {
        w = (w * 768 / shortest).max(1);
        h = (h * 768 / shortest).max(1);
    }
    // w, h <= 2048 here
    OPENAI_LOW + 170 * (w.div_ceil(512) * h.div_ceil(512)) as u64
}

/// Anthropic tokens of an image of `w` x `h` pixels (both at least 1).
///
/// A long edge above 1568 is scaled to 1568 (integer division, never below 1 pixel); the
/// pixels are then capped at [`ANTHROPIC_MAX_PIXELS`] (Anthropic scales such images down
/// until they are within the limit) and cost ceil(pixels / 750), at least 1. Source:
/// Anthropic vision guide (docs.anthropic.com/en/docs/vision): "tokens = (width px *
/// height px)/750"; its examples are 200x200 ~54, 1000x1000 ~1334, 1092x1092 ~1590, which
/// this rounding reproduces. Claude models with a larger native resolution (Opus 4.7:
/// 2576-pixel long edge) can cost more for large images.
///
/// ```
/// use contextwindow_core::image::anthropic_tokens;
/// assert_eq!(anthropic_tokens(1092, 1092), 1590);
/// assert_eq!(anthropic_tokens(200, 200), 54);
/// assert_eq!(anthropic_tokens(8000, 8000), 1640);
/// ```
pub fn anthropic_tokens(w: u64, h: u64) -> u64 {
    let (mut w, mut h) = (u128::from(w), u128::from(h));
    let longest = w.max(h);
    let edge = u128::from(ANTHROPIC_MAX_EDGE);
    if longest > edge {
        w = (w * edge / longest).max(1);
        h = (h * edge / longest).max(1);
    }
    // w, h <= 1568 here
    let pixels = ((w * h) as u64).min(ANTHROPIC_MAX_PIXELS);
    pixels.div_ceil(ANTHROPIC_PIXELS_PER_TOKEN).max(1)
}

/// The provider shape of an image part from its `source`.
pub fn shape(source: Option<&RawValue>) -> Shape {
    match source.map(|s| s.get().trim_start().as_bytes().first()) {
        Some(Some(b'"')) => Shape::OpenAI,
        Some(Some(b'{')) => Shape::Anthropic,
        _ => Shape::Unknown,
    }
}

/// Tokens of an image part under `model`.
///
/// Explicit `width` and `height` (both present and above 0) win; otherwise the size is
/// read from the header of inline base64 data in `source` (an OpenAI data URL, an
/// Anthropic `{"type": "base64", "data": ...}` object); otherwise it is unknown. An
/// OpenAI-shaped part with `detail: "low"` is 85 without reading anything.
pub fn image_tokens(model: ImageModel, p: &Part) -> u64 {
    if let ImageModel::Fixed(n) = model {
        return n;
    }
    let source = p.source.as_deref();
    let detail = p.detail.as_deref();
    let shape = shape(source);
    if shape == Shape::OpenAI && detail == Some("low") {
        return OPENAI_LOW; // whatever the size: skip reading it
    }
    let dims = match (p.width, p.height) {
        (Some(w), Some(h)) if w > 0 && h > 0 => Some((w, h)),
        _ => source.and_then(inline_dims),
    };
    let openai = || match dims {
        Some((w, h)) => openai_tokens(w, h, detail),
        None if detail == Some("low") => OPENAI_LOW,
        None => OPENAI_UNKNOWN,
    };
    let anthropic = || dims.map_or(ANTHROPIC_UNKNOWN, |(w, h)| anthropic_tokens(w, h));
    match shape {
        Shape::OpenAI => openai(),
        Shape::Anthropic => anthropic(),
        Shape::Unknown => openai().max(anthropic()),
    }
}

/// The fields of an Anthropic `source` object that matter here.
#[derive(Deserialize)]
struct SourceObject<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

/// The text of a JSON string, borrowed when it has no escapes; `None` for other values.
fn json_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let s = raw.get().trim();
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(s).ok().map(Cow::Owned)
}

/// Pixel size of the image inline in `source`: a string (an OpenAI data URL, or bare
/// base64) or an object with `"type": "base64"` and a string `data` (Anthropic). `None`
/// for a remote URL, a file reference, or data whose header is not understood.
pub fn inline_dims(source: &RawValue) -> Option<(u64, u64)> {
    match shape(Some(source)) {
        Shape::OpenAI => dims_from_base64(&json_str(source)?),
        Shape::Anthropic => {
            let obj: SourceObject<'_> = serde_json::from_str(source.get()).ok()?;
            if json_str(obj.kind?)?.as_ref() != "base64" {
                return None;
            }
            dims_from_base64(&json_str(obj.data?)?)
        }
        Shape::Unknown => None,
    }
}

/// Pixel size `(width, height)` of a PNG, GIF, WebP or JPEG image given as base64 text.
///
/// Accepts bare base64 (standard or URL-safe alphabet, padded or not) or a
/// `data:<type>;base64,<data>` URL (`data:` and `;base64` in any ASCII case). Only the
/// quanta holding the header bytes are decoded. ASCII spaces, tabs and line breaks inside
/// the base64 are skipped (one pass over the text to remove them, only when there are
/// some). `None` for non-ASCII text, other formats, a header that is malformed or
/// truncated, or a size of 0.
///
/// ```
/// use contextwindow_core::image::dims_from_base64;
/// // a GIF header: "GIF89a", width 3, height 2 (little-endian)
/// assert_eq!(dims_from_base64("R0lGODlhAwACAAAAAAAA"), Some((3, 2)));
/// assert_eq!(dims_from_base64("data:image/gif;base64,R0lGODlhAwACAAAAAAAA"), Some((3, 2)));
/// assert_eq!(dims_from_base64("https://example.com/a.png"), None);
/// ```
pub fn dims_from_base64(data: &str) -> Option<(u64, u64)> {
    let mut b64 = data.as_bytes();
    if b64.len() >= 5 && b64[..5].eq_ignore_ascii_case(b"data:") {
        let comma = b64.iter().position(|&b| b == b',')?;
        let head = &b64[..comma];
        if head.len() < 7 || !head[head.len() - 7..].eq_ignore_ascii_case(b";base64") {
            return None;
        }
        b64 = &b64[comma + 1..];
    }
    if !b64.is_ascii() {
        return None;
    }
    // checked 64 characters at a time without an early exit, which the compiler turns
    // into vector compares: the whole function took 4.6 times the instructions with a
    // byte-by-byte `any` on the corpus's 16 kB images (only their header is decoded)
    let spaced = b64
        .chunks(64)
        .any(|c| c.iter().fold(false, |s, &b| s | is_b64_space(b)));
    let clean: Cow<'_, [u8]> = if spaced {
        Cow::Owned(b64.iter().copied().filter(|b| !is_b64_space(*b)).collect())
    } else {
        Cow::Borrowed(b64)
    };
    let r = Base64::new(&clean)?;
    let dims = match r.read::<4>(0)? {
        [0xFF, 0xD8, _, _] => jpeg(&r),
        [0x89, b'P', b'N', b'G'] => png(&r),
        [b'G', b'I', b'F', b'8'] => gif(&r),
        [b'R', b'I', b'F', b'F'] => webp(&r),
        _ => None,
    }?;
    (dims.0 > 0 && dims.1 > 0).then_some(dims)
}

fn is_b64_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Random access to the bytes encoded by base64 text: reading byte `i` decodes only the
/// 4-character quantum that holds it.
struct Base64<'a> {
    /// The base64 characters without trailing padding.
    chars: &'a [u8],
    /// Number of decoded bytes.
    len: u64,
}

/// Value of a base64 character (standard and URL-safe alphabets), 255 when invalid.
const fn b64_table() -> [u8; 256] {
    let mut t = [255u8; 256];
    let mut i = 0;
    while i < 26 {
        t[b'A' as usize + i] = i as u8;
        t[b'a' as usize + i] = 26 + i as u8;
        i += 1;
    }
    let mut d = 0;
    while d < 10 {
        t[b'0' as usize + d] = 52 + d as u8;
        d += 1;
    }
    t[b'+' as usize] = 62;
    t[b'-' as usize] = 62;
    t[b'/' as usize] = 63;
    t[b'_' as usize] = 63;
    t
}

static B64: [u8; 256] = b64_table();

impl<'a> Base64<'a> {
    /// `None` when the length cannot be base64 (one character past a whole quantum).
    fn new(text: &'a [u8]) -> Option<Self> {
        let mut chars = text;
        for _ in 0..2 {
            if let [rest @ .., b'='] = chars {
                chars = rest;
            }
        }
        let n = chars.len() as u64;
        let len = match n % 4 {
            0 => n / 4 * 3,
            2 => n / 4 * 3 + 1,
            3 => n / 4 * 3 + 2,
            _ => return None,
        };
        Some(Base64 { chars, len })
    }

    /// Byte `i`, or `None` past the end or when its quantum has an invalid character.
    fn byte(&self, i: u64) -> Option<u8> {
        if i >= self.len {
            return None;
        }
        let start = usize::try_from(i / 3 * 4).ok()?;
        let end = (start + 4).min(self.chars.len());
        let mut v: u32 = 0;
        for k in 0..4 {
            let c = if start + k < end {
                let c = B64[self.chars[start + k] as usize];
                if c == 255 {
                    return None;
                }
                c
            } else {
                0
            };
            v = (v << 6) | u32::from(c);
        }
        Some((v >> (16 - 8 * (i % 3))) as u8)
    }

    /// `N` bytes from offset `off`.
    fn read<const N: usize>(&self, off: u64) -> Option<[u8; N]> {
        let mut out = [0u8; N];
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.byte(off.checked_add(k as u64)?)?;
        }
        Some(out)
    }
}

fn be16(b: [u8; 2]) -> u64 {
    u64::from(u16::from_be_bytes(b))
}

fn le16(b: &[u8]) -> u64 {
    u64::from(b[0]) | u64::from(b[1]) << 8
}

fn le24(b: &[u8]) -> u64 {
    u64::from(b[0]) | u64::from(b[1]) << 8 | u64::from(b[2]) << 16
}

/// PNG: the 8-byte signature, then the IHDR chunk: width and height, 32-bit big-endian.
fn png(r: &Base64<'_>) -> Option<(u64, u64)> {
    let h: [u8; 24] = r.read(0)?;
    if h[..8] != *b"\x89PNG\r\n\x1a\n" || h[12..16] != *b"IHDR" {
        return None;
    }
    let w = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
    let ht = u32::from_be_bytes([h[20], h[21], h[22], h[23]]);
    Some((u64::from(w), u64::from(ht)))
}

/// GIF: `GIF87a`/`GIF89a`, then the logical screen width and height, 16-bit little-endian.
fn gif(r: &Base64<'_>) -> Option<(u64, u64)> {
    let h: [u8; 10] = r.read(0)?;
    if h[..6] != *b"GIF87a" && h[..6] != *b"GIF89a" {
        return None;
    }
    Some((le16(&h[6..8]), le16(&h[8..10])))
}

/// WebP: `RIFF`, size, `WEBP`, then the first chunk: `VP8 ` (lossy: frame start code
/// 9D 01 2A, then 14-bit width and height), `VP8L` (lossless: signature 0x2F, then 14-bit
/// width-1 and height-1) or `VP8X` (extended: 24-bit canvas width-1 and height-1).
fn webp(r: &Base64<'_>) -> Option<(u64, u64)> {
    let h: [u8; 16] = r.read(0)?;
    if h[8..12] != *b"WEBP" {
        return None;
    }
    match &h[12..16] {
        b"VP8 " => {
            let f: [u8; 10] = r.read(20)?;
            if f[3..6] != [0x9D, 0x01, 0x2A] {
                return None;
            }
            Some((le16(&f[6..8]) & 0x3FFF, le16(&f[8..10]) & 0x3FFF))
        }
        b"VP8L" => {
            let f: [u8; 5] = r.read(20)?;
            if f[0] != 0x2F {
                return None;
            }
            let bits = u32::from_le_bytes([f[1], f[2], f[3], f[4]]);
            Some((
                u64::from(bits & 0x3FFF) + 1,
                u64::from((bits >> 14) & 0x3FFF) + 1,
            ))
        }
        b"VP8X" => {
            let f: [u8; 10] = r.read(20)?;
            Some((le24(&f[4..7]) + 1, le24(&f[7..10]) + 1))
        }
        _ => None,
    }
}

/// JPEG: walk the marker segments from SOI to the first start-of-frame (SOF0-SOF15 but
/// DHT C4, JPG C8 and DAC CC), skipping each segment by its length; the frame header
/// holds precision, then height and width, 16-bit big-endian. `None` at SOS or EOI
/// (no frame header before the scan), at a byte that is not a marker, or past the end.
fn jpeg(r: &Base64<'_>) -> Option<(u64, u64)> {
    let mut pos: u64 = 2;
    loop {
        if r.byte(pos)? != 0xFF {
            return None;
        }
        let mut marker = r.byte(pos + 1)?;
        while marker == 0xFF {
            // fill bytes before a marker
            pos += 1;
            marker = r.byte(pos + 1)?;
        }
        pos += 2;
        match marker {
            0x01 | 0xD0..=0xD8 => continue, // standalone: TEM, RSTn, SOI
            0x00 | 0xD9 | 0xDA => return None,
            _ => {}
        }
        let len = be16(r.read(pos)?);
        if len < 2 {
            return None;
        }
        if matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC) {
            let f: [u8; 5] = r.read(pos + 2)?;
            return Some((be16([f[3], f[4]]), be16([f[1], f[2]])));
        }
        pos += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard base64 with padding (test helper; the engine never encodes).
    fn b64(bytes: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let v = chunk
                .iter()
                .enumerate()
                .fold(0u32, |v, (k, &b)| v | u32::from(b) << (16 - 8 * k));
            for k in 0..=chunk.len() {
                out.push(A[(v >> (18 - 6 * k) & 63) as usize] as char);
            }
            for _ in chunk.len()..3 {
                out.push('=');
            }
        }
        out
    }

    fn png_bytes(w: u32, h: u32) -> Vec<u8> {
        let mut v = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        v.extend_from_slice(&w.to_be_bytes());
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&[8, 6, 0, 0, 0, 0xAA, 0xBB, 0xCC, 0xDD]); // depth..crc
        v
    }

    fn gif_bytes(w: u16, h: u16) -> Vec<u8> {
        let mut v = b"GIF89a".to_vec();
        v.extend_from_slice(&w.to_le_bytes());
        v.extend_from_slice(&h.to_le_bytes());
        v.extend_from_slice(&[0xF7, 0, 0]);
        v
    }

    fn riff(chunk: &[u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut v = b"RIFF".to_vec();
        v.extend_from_slice(&((payload.len() + 12) as u32).to_le_bytes());
        v.extend_from_slice(b"WEBP");
        v.extend_from_slice(chunk);
        v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        v.extend_from_slice(payload);
        v
    }

    fn webp_lossy(w: u16, h: u16) -> Vec<u8> {
        let mut p = vec![0x30, 0x01, 0x00, 0x9D, 0x01, 0x2A];
        p.extend_from_slice(&w.to_le_bytes());
        p.extend_from_slice(&h.to_le_bytes());
        riff(b"VP8 ", &p)
    }

    fn webp_lossless(w: u32, h: u32) -> Vec<u8> {
        let bits = (w - 1) | (h - 1) << 14;
        let mut p = vec![0x2F];
        p.extend_from_slice(&bits.to_le_bytes());
        riff(b"VP8L", &p)
    }

    fn webp_extended(w: u32, h: u32) -> Vec<u8> {
        let mut p = vec![0x10, 0, 0, 0];
        p.extend_from_slice(&(w - 1).to_le_bytes()[..3]);
        p.extend_from_slice(&(h - 1).to_le_bytes()[..3]);
        riff(b"VP8X", &p)
    }

    /// SOI, APP0 (JFIF), an APP1 of `exif` bytes, DQT, then `sof` with the size.
    fn jpeg_bytes(w: u16, h: u16, sof: u8, exif: usize) -> Vec<u8> {
        let mut v = vec![0xFF, 0xD8];
        v.extend_from_slice(&[0xFF, 0xE0, 0, 16]);
        v.extend_from_slice(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
        v.extend_from_slice(&[0xFF, 0xE1]);
        v.extend_from_slice(&((exif + 2) as u16).to_be_bytes());
        v.extend((0..exif).map(|i| (i % 251) as u8));
        v.extend_from_slice(&[0xFF, 0xFF, 0xDB, 0, 4, 0, 1]); // a fill byte, then DQT
        v.extend_from_slice(&[0xFF, 0xC4, 0, 3, 0]); // DHT: not a frame header
        v.extend_from_slice(&[0xFF, sof, 0, 11, 8]);
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&w.to_be_bytes());
        v.extend_from_slice(&[1, 1, 0x11, 0]);
        v.extend_from_slice(&[0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0x3F, 0]);
        v.extend_from_slice(&[0x12, 0x34, 0xFF, 0xD9]);
        v
    }

    #[test]
    fn openai_documented_examples() {
        // 1024x1024 -> 768x768 -> 4 tiles -> 765
        assert_eq!(openai_tokens(1024, 1024, None), 765);
        assert_eq!(openai_tokens(1024, 1024, Some("high")), 765);
        // 2048x4096 -> 1024x2048 -> 768x1536 -> 2x3 tiles -> 1105
        assert_eq!(openai_tokens(2048, 4096, Some("auto")), 1105);
        assert_eq!(openai_tokens(4096, 8192, Some("low")), 85);
        assert_eq!(openai_tokens(512, 512, None), 255);
        assert_eq!(openai_tokens(513, 512, None), 425);
        assert_eq!(openai_tokens(1, 1, None), 255);
        // 1920x1080 -> short side 768: 1365x768 -> 3x2 tiles
        assert_eq!(openai_tokens(1920, 1080, None), 1105);
        // the largest: 768x2048 after scaling, 2x4 tiles
        assert_eq!(openai_tokens(768, 2048, None), OPENAI_UNKNOWN);
        assert_eq!(openai_tokens(1536, 4096, None), OPENAI_UNKNOWN);
        assert_eq!(openai_tokens(3000, 100_000, None), 765); // 61x2048: 1x4 tiles
        assert_eq!(openai_tokens(u64::MAX, 1, None), 85 + 170 * 4); // 2048x1
    }

    #[test]
    fn anthropic_documented_examples() {
        // docs.anthropic.com/en/docs/vision, "Calculate image costs"
        assert_eq!(anthropic_tokens(200, 200), 54); // ~54
        assert_eq!(anthropic_tokens(1000, 1000), 1334); // ~1334
        assert_eq!(anthropic_tokens(1092, 1092), 1590); // ~1590
                                                        // the table of sizes that are not resized: their own formula value
        assert_eq!(anthropic_tokens(951, 1268), 1608);
        assert_eq!(anthropic_tokens(896, 1344), 1606);
        assert_eq!(anthropic_tokens(819, 1456), 1590);
        assert_eq!(anthropic_tokens(784, 1568), 1640);
        // long edge 3136 -> 1568: 1568x784
        assert_eq!(anthropic_tokens(3136, 1568), 1640);
        // 4000x3000 -> 1568x1176 -> capped pixels
        assert_eq!(anthropic_tokens(4000, 3000), ANTHROPIC_UNKNOWN);
        assert_eq!(ANTHROPIC_UNKNOWN, 1640);
        assert_eq!(anthropic_tokens(1, 1), 1);
        assert_eq!(anthropic_tokens(u64::MAX, 1), 3); // 1568x1
    }

    #[test]
    fn reads_each_format() {
        let cases: Vec<(Vec<u8>, (u64, u64))> = vec![
            (png_bytes(1024, 768), (1024, 768)),
            (png_bytes(1, 70000), (1, 70000)),
            (gif_bytes(3, 2), (3, 2)),
            (b"GIF87a\x40\x01\xf0\x00".to_vec(), (320, 240)),
            (webp_lossy(640, 480), (640, 480)),
            (webp_lossless(16383, 1), (16383, 1)),
            (webp_extended(16_777_216, 3), (16_777_216, 3)),
            (jpeg_bytes(1920, 1080, 0xC0, 0), (1920, 1080)),
            (jpeg_bytes(800, 600, 0xC2, 5000), (800, 600)), // progressive, big EXIF
            (jpeg_bytes(7, 9, 0xCF, 65533), (7, 9)),
        ];
        for (bytes, want) in cases {
            let text = b64(&bytes);
            assert_eq!(dims_from_base64(&text), Some(want), "{text}");
            let url = format!("data:image/x;base64,{text}");
            assert_eq!(dims_from_base64(&url), Some(want));
            let upper = format!("DATA:image/x;charset=x;BASE64,{text}");
            assert_eq!(dims_from_base64(&upper), Some(want));
            let unpadded = text.trim_end_matches('=');
            assert_eq!(dims_from_base64(unpadded), Some(want));
            let urlsafe = text.replace('+', "-").replace('/', "_");
            assert_eq!(dims_from_base64(&urlsafe), Some(want));
            // MIME line breaks (76 characters) and stray spaces
            let wrapped: Vec<String> = text
                .as_bytes()
                .chunks(76)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect();
            assert_eq!(dims_from_base64(&wrapped.join("\r\n")), Some(want));
            assert_eq!(dims_from_base64(&format!(" {text}\n")), Some(want));
        }
    }

    #[test]
    fn skips_without_decoding_everything() {
        // Garbage after the frame header is never read.
        let mut text = b64(&jpeg_bytes(10, 20, 0xC1, 3));
        text.push_str(&"!".repeat(1000));
        text.push_str("AAA"); // keep the length a valid base64 length
        assert_eq!(dims_from_base64(&text), Some((10, 20)));
        // Invalid characters inside a skipped segment are never decoded either.
        let bytes = jpeg_bytes(10, 20, 0xC1, 3000);
        let mut text = b64(&bytes).into_bytes();
        text[800] = b'*';
        let text = String::from_utf8(text).unwrap();
        assert_eq!(dims_from_base64(&text), Some((10, 20)));
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        let bad = [
            "",
            "A",
            "AAAA",
            "AAAAA",
            "iVBORw0KGgo",        // PNG signature only
            "R0lGODlh",           // "GIF89a" only
            "/9j/",               // SOI only
            "/9j/2Q==",           // SOI, EOI
            "/9j/2gAI",           // SOI, SOS
            "/9j/AA==",           // SOI, not a marker
            "/9j//+AAAQ==",       // APPn with length 1
            "UklGRgAAAABXRUJQ",   // RIFF/WEBP, no chunk
            "UklGRgAAAABBVkkg",   // RIFF/AVI
            "R0lGODdhAAAAAA==",   // GIF of 0x0
            "Qk0=",               // BMP
            "PHN2ZyB4bWxucz0i",   // SVG text
            "data:image/png,abc", // not base64
            "data:image/png;base64",
            "https://example.com/a.png",
            "ｉVBORw0KGgo",
        ];
        for t in bad {
            assert_eq!(dims_from_base64(t), None, "{t}");
        }
        // A PNG whose IHDR says 0 pixels wide.
        assert_eq!(dims_from_base64(&b64(&png_bytes(0, 5))), None);
        // Not IHDR where it must be.
        let mut p = png_bytes(5, 5);
        p[12] = b'X';
        assert_eq!(dims_from_base64(&b64(&p)), None);
        // VP8 without its start code.
        let mut w = webp_lossy(5, 5);
        w[23] = 0;
        assert_eq!(dims_from_base64(&b64(&w)), None);
    }

    /// Every truncation and every single-byte corruption of each format returns a size or
    /// `None`, never panics; the full and the truncated-after-the-header texts agree.
    #[test]
    fn fuzz_truncations_and_corruptions() {
        let samples = [
            png_bytes(300, 200),
            gif_bytes(300, 200),
            webp_lossy(300, 200),
            webp_lossless(300, 200),
            webp_extended(300, 200),
            jpeg_bytes(300, 200, 0xC0, 40),
        ];
        for bytes in &samples {
            let text = b64(bytes);
            for cut in 0..=text.len() {
                let got = dims_from_base64(&text[..cut]);
                assert!(got.is_none() || got == Some((300, 200)), "{cut}");
            }
            for i in 0..bytes.len() {
                for flip in [0x00, 0xFF, 0x01, 0x80] {
                    let mut b = bytes.clone();
                    b[i] ^= flip;
                    let _ = dims_from_base64(&b64(&b));
                }
            }
        }
        // Pseudo-random bytes and text (xorshift), with each format's magic in front.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let magics: [&[u8]; 6] = [
            b"",
            b"\xFF\xD8",
            b"\x89PNG",
            b"GIF8",
            b"RIFF",
            b"\xFF\xD8\xFF",
        ];
        for round in 0..20_000 {
            let n = (next() % 80) as usize;
            let mut b: Vec<u8> = magics[round % magics.len()].to_vec();
            b.extend((0..n).map(|_| next() as u8));
            let _ = dims_from_base64(&b64(&b));
            let s: String = (0..n).map(|_| (next() % 128) as u8 as char).collect();
            let _ = dims_from_base64(&s);
        }
    }

    fn part(json: &str) -> Part {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn cost_by_shape() {
        let png = b64(&png_bytes(1024, 1024));
        let openai = part(&format!(
            r#"{{"kind":"image","source":"data:image/png;base64,{png}"}}"#
        ));
        let anthropic = part(&format!(
            r#"{{"kind":"image","source":{{"type":"base64","media_type":"image/png","data":"{png}"}}}}"#
        ));
        let bare = part(r#"{"kind":"image","width":1024,"height":1024}"#);
        let m = ImageModel::Provider;
        assert_eq!(image_tokens(m, &openai), 765);
        assert_eq!(image_tokens(m, &anthropic), 1399); // 1048576 / 750
        assert_eq!(image_tokens(m, &bare), 1399); // max(765, 1399)
        assert_eq!(image_tokens(ImageModel::Fixed(765), &anthropic), 765);

        // explicit size wins over the header
        let sized = part(&format!(
            r#"{{"kind":"image","width":512,"height":512,"source":"data:image/png;base64,{png}"}}"#
        ));
        assert_eq!(image_tokens(m, &sized), 255);
        // only one of them given: the header decides
        let half = part(&format!(
            r#"{{"kind":"image","width":512,"source":"data:image/png;base64,{png}"}}"#
        ));
        assert_eq!(image_tokens(m, &half), 765);

        // low detail
        let low = part(r#"{"kind":"image","detail":"low","source":"https://x/a.png"}"#);
        assert_eq!(image_tokens(m, &low), 85);
        let low_bare = part(r#"{"kind":"image","detail":"low","width":1000,"height":1000}"#);
        assert_eq!(image_tokens(m, &low_bare), 1334);

        // unknown size
        let remote = part(r#"{"kind":"image","source":"https://x/a.png"}"#);
        assert_eq!(image_tokens(m, &remote), OPENAI_UNKNOWN);
        let remote_a = part(r#"{"kind":"image","source":{"type":"url","url":"https://x/a.png"}}"#);
        assert_eq!(image_tokens(m, &remote_a), ANTHROPIC_UNKNOWN);
        let file = part(r#"{"kind":"image","source":{"type":"file","file_id":"f1"}}"#);
        assert_eq!(image_tokens(m, &file), ANTHROPIC_UNKNOWN);
        let nothing = part(r#"{"kind":"image"}"#);
        assert_eq!(image_tokens(m, &nothing), ANTHROPIC_UNKNOWN);
        let odd = part(r#"{"kind":"image","source":[1]}"#);
        assert_eq!(image_tokens(m, &odd), ANTHROPIC_UNKNOWN);
        let not_b64 = part(r#"{"kind":"image","source":{"type":"text","data":"iVBORw0KGgo"}}"#);
        assert_eq!(image_tokens(m, &not_b64), ANTHROPIC_UNKNOWN);
        let data_num = part(r#"{"kind":"image","source":{"type":"base64","data":5}}"#);
        assert_eq!(image_tokens(m, &data_num), ANTHROPIC_UNKNOWN);
    }

    #[test]
    fn profiles() {
        use crate::estimate::{BYTES4, CONSERVATIVE, FIM};
        let big = part(r#"{"kind":"image","width":4000,"height":3000,"source":"u"}"#);
        let low =
            part(r#"{"kind":"image","width":4000,"height":3000,"detail":"low","source":"u"}"#);
        let tiny = part(r#"{"kind":"image","width":10,"height":10,"source":{"type":"url"}}"#);
        assert_eq!(CONSERVATIVE.image_tokens(&big), 765); // 1024x768: 2x2 tiles
        assert_eq!(CONSERVATIVE.image_tokens(&low), 85);
        assert_eq!(CONSERVATIVE.image_tokens(&tiny), 1);
        for p in [&big, &low, &tiny] {
            assert_eq!(FIM.image_tokens(p), 765);
            assert_eq!(BYTES4.image_tokens(p), 765);
        }
    }

    #[test]
    fn json_escapes_in_source() {
        let gif = b64(&gif_bytes(640, 480));
        // "\/" and a "\n" escape inside the base64: decoded before reading
        let (a, b) = gif.split_at(8);
        let escaped = format!(r#"{{"kind":"image","source":"data:image\/gif;base64,{a}\n{b}"}}"#);
        assert_eq!(image_tokens(ImageModel::Provider, &part(&escaped)), 425); // 2x1 tiles
        let obj = format!(
            r#"{{"kind":"image","source":{{"type":"base\u0036\u0034","data":"{a}\r\n{b}"}}}}"#
        );
        assert_eq!(image_tokens(ImageModel::Provider, &part(&obj)), 410); // 307200/750
    }
}
