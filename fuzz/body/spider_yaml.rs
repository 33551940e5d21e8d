//! A spider file: any text is a spider or errors (every one naming its key or line), and a
//! spider's rules compile into an extractor or errors; never a panic.

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spider) = silk_core::spider::Spider::from_yaml(text, "fuzz.yaml") {
        let _ = silk_fetch::Extractor::compile(&spider);
    }
}
