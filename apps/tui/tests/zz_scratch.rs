use crossterm::event::{KeyCode, KeyEvent};
#[test]
fn scratch() {
    let mut app = toolhost::ui::App::new("m", "/f", tool_executor::ApprovalMode::Manual, "s");
    app.view = toolhost::ui::View::Console;
    let tb = client_executor::device::builtin_toolbox().unwrap();
    for t in tb.tools() {
        for a in &t.manifest.apis {
            app.console.catalogue.push(toolhost::ui::panes::ApiEntry {
                tool: t.manifest.identifier.clone(),
                api: a.name.clone(),
                name: a.name.clone(),
                description: a.description.clone(),
                parameters: a.parameters.clone(),
            });
        }
    }
    let r = app.on_key(KeyEvent::from(KeyCode::Enter));
    eprintln!("{r:?} {:?}", app.console.form.as_ref().map(|f| f.fields.len()));
    let mut terminal = ratatui::Terminal::new(toolhost::ui::vt::Vt100Backend::new(80, 30)).unwrap();
    terminal.draw(|f| toolhost::ui::render(&app, f)).unwrap();
    eprintln!("{}", terminal.backend().text());
}
