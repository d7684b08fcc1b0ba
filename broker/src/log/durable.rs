//! Crash-safe replacement of small files (checkpoints, `meta.properties`).
//!
//! Invariant: after [`write_atomically`] returns `Ok`, a power loss leaves either the whole new
//! content under `path` or (had it failed earlier) the whole old content, never a mix or an
//! empty file: the temp file is fsynced before the rename, and the directory after it (a rename
//! is only durable once the directory entry is).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

/// Opens (creating it) `path` and takes an exclusive `flock` on it without waiting: `None`
/// when another open file holds it (another process, or this one through another handle). The
/// lock lasts as long as the returned file, and dies with the process (also on kill -9).
pub fn lock_exclusive(path: &Path) -> io::Result<Option<File>> {
    let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(fs::TryLockError::WouldBlock) => Ok(None),
        Err(fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Replaces `path` with `bytes`: write `<path>.tmp`, fsync it, rename it over `path`, fsync
/// the directory. A failure removes the temp file (best effort) and leaves `path` as it was.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent(path)?;
    let mut tmp_name = path.file_name().ok_or_else(no_file_name)?.to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let written = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// fsyncs a directory, making the creations, renames and deletions in it durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn parent(path: &Path) -> io::Result<&Path> {
    match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Ok(Path::new(".")),
        Some(p) => Ok(p),
        None => Err(no_file_name()),
    }
}

fn no_file_name() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "write_atomically needs a file path")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomically_replaces_the_content_and_leaves_no_temp_file() {
        // Proves the new content replaces the old whole, the temp file is gone afterwards, and
        // a missing directory is an error that creates nothing.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.properties");
        write_atomically(&path, b"first\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first\n");
        write_atomically(&path, b"second, longer\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second, longer\n");
        write_atomically(&path, b"3\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"3\n");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("meta.properties")], "no temp file left behind");

        let missing = dir.path().join("no-such-dir").join("file");
        let err = write_atomically(&missing, b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(!dir.path().join("no-such-dir").exists());
    }

    #[test]
    fn a_failed_rename_keeps_the_old_content_and_removes_the_temp_file() {
        // Proves a failure after the temp file was written (here: the target is a directory)
        // leaves the target untouched and cleans up the temp file.
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("inside"), b"keep").unwrap();
        assert!(write_atomically(&target, b"new").is_err());
        assert_eq!(fs::read(target.join("inside")).unwrap(), b"keep");
        assert!(!dir.path().join("target.tmp").exists());
    }
}
