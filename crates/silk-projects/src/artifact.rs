//! Packed artifacts: a built directory as one tar stream compressed with zstd, named by the
//! SHA-256 of the packed bytes. The repository's `.git` is left out; symbolic links stay
//! links (a virtualenv's `python` points at the system's).

use crate::error::ProjectError;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;

/// zstd level: fast, and still several times smaller than the tree.
const LEVEL: i32 = 3;

/// A writer that hashes and counts what passes through it.
struct Hashing<W: Write> {
    inner: W,
    hash: Sha256,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Packs `dir` (without its top-level `.git`) into `out`; returns the SHA-256 (hex) and the
/// size of `out`. Blocking.
pub fn pack(dir: &Path, out: &Path) -> Result<(String, u64), ProjectError> {
    let file = std::fs::File::create(out).map_err(|e| ProjectError::io(out, e))?;
    let hashing = Hashing {
        inner: std::io::BufWriter::new(file),
        hash: Sha256::new(),
        bytes: 0,
    };
    let encoder = zstd::Encoder::new(hashing, LEVEL).map_err(|e| ProjectError::io(out, e))?;
    let mut tar = tar::Builder::new(encoder);
    tar.follow_symlinks(false);
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| ProjectError::io(dir, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| ProjectError::io(dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| ProjectError::io(&path, e))?;
        if kind.is_dir() {
            tar.append_dir_all(&name, &path)
        } else {
            tar.append_path_with_name(&path, &name)
        }
        .map_err(|e| ProjectError::io(&path, e))?;
    }
    let encoder = tar.into_inner().map_err(|e| ProjectError::io(out, e))?;
    let mut hashing = encoder.finish().map_err(|e| ProjectError::io(out, e))?;
    hashing.flush().map_err(|e| ProjectError::io(out, e))?;
    hashing
        .inner
        .into_inner()
        .map_err(|e| ProjectError::io(out, e.error()))?
        .sync_all()
        .map_err(|e| ProjectError::io(out, e))?;
    Ok((crate::hex(&hashing.hash.finalize()), hashing.bytes))
}

/// Unpacks a packed artifact (`from`) into `dir` (made if absent). Blocking.
pub fn unpack(from: &Path, dir: &Path) -> Result<(), ProjectError> {
    let file = std::fs::File::open(from).map_err(|e| ProjectError::io(from, e))?;
    let decoder = zstd::Decoder::new(file).map_err(|e| ProjectError::io(from, e))?;
    std::fs::create_dir_all(dir).map_err(|e| ProjectError::io(dir, e))?;
    tar::Archive::new(decoder)
        .unpack(dir)
        .map_err(|e| ProjectError::io(from, e))
}

/// Reads the regular files `wanted` (paths relative to the packed directory, `./` or not)
/// out of packed bytes read from `packed`, each at most `max_bytes`; a file that is not in
/// it (or is a link or a directory) is missing from the answer. `what` names the artifact in
/// errors. Blocking.
pub fn read_files(
    packed: impl std::io::Read,
    wanted: &[String],
    max_bytes: u64,
    what: &str,
) -> Result<std::collections::BTreeMap<String, Vec<u8>>, ProjectError> {
    use std::io::Read;
    let at = Path::new(what);
    let normal = |p: &str| p.trim_start_matches("./").to_owned();
    let wanted: std::collections::BTreeSet<String> = wanted.iter().map(|w| normal(w)).collect();
    let mut found = std::collections::BTreeMap::new();
    let decoder = zstd::Decoder::new(packed).map_err(|e| ProjectError::io(at, e))?;
    let mut archive = tar::Archive::new(decoder);
    for entry in archive.entries().map_err(|e| ProjectError::io(at, e))? {
        let entry = entry.map_err(|e| ProjectError::io(at, e))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = match entry.path() {
            Ok(p) => normal(&p.to_string_lossy()),
            Err(_) => continue,
        };
        if !wanted.contains(&name) {
            continue;
        }
        if entry.size() > max_bytes {
            return Err(ProjectError::Invalid {
                what: name,
                reason: format!("{} bytes, more than {max_bytes} (in {what})", entry.size()),
            });
        }
        let mut bytes = Vec::new();
        entry
            .take(max_bytes)
            .read_to_end(&mut bytes)
            .map_err(|e| ProjectError::io(at, e))?;
        found.insert(name, bytes);
        if found.len() == wanted.len() {
            break;
        }
    }
    Ok(found)
}

/// The SHA-256 (hex) of a file. Blocking.
pub fn sha256_of(path: &Path) -> Result<String, ProjectError> {
    let mut file = std::fs::File::open(path).map_err(|e| ProjectError::io(path, e))?;
    let mut hash = Sha256::new();
    std::io::copy(&mut file, &mut hash).map_err(|e| ProjectError::io(path, e))?;
    Ok(crate::hex(&hash.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_round_trips_without_git_and_with_links() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join(".git/objects")).unwrap();
        std::fs::create_dir_all(src.join("pkg/sub")).unwrap();
        std::fs::write(src.join(".git/HEAD"), "ref").unwrap();
        std::fs::write(src.join("pkg/sub/a.py"), "print(1)\n").unwrap();
        std::fs::write(src.join("run.sh"), "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("pkg/sub/a.py", src.join("link")).unwrap();
        let packed = dir.path().join("a.tar.zst");
        let (sha, bytes) = pack(&src, &packed).unwrap();
        assert_eq!(bytes, std::fs::metadata(&packed).unwrap().len());
        assert_eq!(sha, sha256_of(&packed).unwrap());
        let out = dir.path().join("out");
        unpack(&packed, &out).unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("pkg/sub/a.py")).unwrap(),
            "print(1)\n"
        );
        assert!(!out.join(".git").exists());
        #[cfg(unix)]
        assert!(
            std::fs::symlink_metadata(out.join("link"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // Packing is deterministic for the same tree and times.
        let again = dir.path().join("b.tar.zst");
        assert_eq!(pack(&src, &again).unwrap().0, sha);
        // Files are read out of the packed bytes by their relative path; links, `.git` and
        // names not there are not found, and a file over the limit is an error.
        let wanted = ["./pkg/sub/a.py", "run.sh", "link", ".git/HEAD", "nope"].map(String::from);
        let open = || std::fs::File::open(&packed).unwrap();
        let found = read_files(open(), &wanted, 1_000, "a.tar.zst").unwrap();
        assert_eq!(found.keys().collect::<Vec<_>>(), ["pkg/sub/a.py", "run.sh"]);
        assert_eq!(found["pkg/sub/a.py"], b"print(1)\n");
        let err = read_files(open(), &wanted, 5, "a.tar.zst")
            .unwrap_err()
            .to_string();
        assert!(err.contains("more than 5"), "{err}");
    }
}
