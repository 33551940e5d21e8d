//! A run's expanded start requests (the spider's `expand`, `silk_core::expand`) resolved on
//! the hub: the run's args fill `{arg: NAME}` parameters, and `{file: PATH}` parameters are
//! read out of the packed directory of the run's program version, streamed from the store's
//! artifact chunks (a spider run has no project, so no files). The run start checks it (a
//! bad one is `400`); the run resolves it again whenever a hub opens it, from the same
//! immutable version.

use crate::error::HubError;
use crate::run::ProgramRun;
use silk_core::expand::Expansion;
use silk_core::spider::Spider;
use silk_store::MetaStore;
use std::collections::BTreeMap;

/// Most bytes of one parameter file (a file of keywords, read whenever a hub opens the run).
const MAX_FILE_BYTES: u64 = 64 << 20;

/// The spider's expansion (`None`: it has no `expand`); `400` naming the parameter when a
/// file or an arg is missing or a template gives no fetchable URL.
pub(crate) async fn resolve(
    store: &dyn MetaStore,
    spider: &Spider,
    args: &BTreeMap<String, String>,
    program: Option<&ProgramRun>,
) -> Result<Option<Expansion>, HubError> {
    if spider.spec.expand.is_empty() {
        return Ok(None);
    }
    let wanted: Vec<String> = spider
        .spec
        .expand
        .iter()
        .flat_map(|e| e.files())
        .map(str::to_owned)
        .collect();
    let files: Result<BTreeMap<String, Vec<u8>>, String> = if wanted.is_empty() {
        Ok(BTreeMap::new())
    } else {
        match program {
            None => Err(
                "a spider run has no project to read it from (a program run reads it from its version; give the values as a list or with {arg: NAME})".into(),
            ),
            Some(p) => match &p.artifact {
                None => Err(format!(
                    "version {} of project {} has no packed directory (a container version): give the values as a list or with {{arg: NAME}}",
                    p.version, p.spec.project
                )),
                Some(artifact) => read_artifact_files(store, &artifact.sha256, &wanted)
                    .await
                    .map_err(|e| format!("version {} of project {}: {e}", p.version, p.spec.project)),
            },
        }
    };
    let mut read = |file: &str| -> Result<String, String> {
        let files = files.as_ref().map_err(Clone::clone)?;
        let key = file.trim_start_matches("./");
        let bytes = files
            .get(key)
            .ok_or_else(|| "not a file of the project version".to_owned())?;
        String::from_utf8(bytes.clone()).map_err(|_| "not UTF-8 text".to_owned())
    };
    spider
        .expansion(args, &mut read)
        .map_err(|e| HubError::BadRun(e.to_string()))
}

/// The files `wanted` of artifact `sha256`: its chunks are streamed from the store to a
/// blocking reader that unpacks only those files.
async fn read_artifact_files(
    store: &dyn MetaStore,
    sha256: &str,
    wanted: &[String],
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let chunks = store
        .count_artifact_chunks(sha256)
        .await
        .map_err(|e| e.to_string())?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(2);
    let wanted = wanted.to_vec();
    let what = format!("artifact {sha256}");
    let reader = tokio::task::spawn_blocking(move || {
        silk_projects::artifact::read_files(
            ChunkReader {
                rx,
                chunk: Vec::new(),
                at: 0,
            },
            &wanted,
            MAX_FILE_BYTES,
            &what,
        )
    });
    let mut missing = None;
    for seq in 0..chunks {
        let Ok(seq) = u32::try_from(seq) else { break };
        match store.get_artifact_chunk(sha256, seq).await {
            Ok(Some(chunk)) => {
                // The reader stops early once it has every file: the rest is not needed.
                if tx.send(chunk).await.is_err() {
                    break;
                }
            }
            Ok(None) => {
                missing = Some(format!("artifact {sha256}: chunk {seq} is missing"));
                break;
            }
            Err(e) => {
                missing = Some(e.to_string());
                break;
            }
        }
    }
    drop(tx);
    let read = reader.await.map_err(|e| e.to_string())?;
    if let Some(e) = missing {
        return Err(e);
    }
    read.map_err(|e| e.to_string())
}

/// A blocking `Read` over chunks sent by an async task; the end of the chunks is the end.
struct ChunkReader {
    rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.blocking_recv() {
                Some(chunk) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}
