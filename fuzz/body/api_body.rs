//! API request bodies as JSON: a job spec (validated as the API does), a run request, an
//! agent's downloader config (and the commands in it); each is read or refused, never a
//! panic.

pub fn run(data: &[u8]) {
    if let Ok(spec) = serde_json::from_slice::<silk_api::jobs::JobSpec>(data) {
        let _ = silk_hub::jobs::validate_spec(&spec);
    }
    if let Ok(request) = serde_json::from_slice::<silk_api::runs::RunRequest>(data) {
        if let Some(fail_if) = &request.fail_if {
            let _ = fail_if.problems();
        }
        if let Some(downloader) = &request.downloader {
            let _ = silk_core::command::raw_command_fields(downloader);
        }
    }
    if let Ok(config) = serde_json::from_slice::<silk_agent::DownloaderConfig>(data) {
        let _ = config.problems();
    }
}
