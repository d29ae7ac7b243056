//! Questions go to the screen; answers come back from it.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tool_executor::approval::ApprovalRequest;
use tool_executor::{ApprovalBroker, Decided};

/// A question on its way to the screen, with where its answer goes.
#[derive(Debug)]
pub struct Asked {
    /// The question.
    pub request: ApprovalRequest,
    /// The answer.
    pub answer: oneshot::Sender<Decided>,
}

/// Sends each question to the screen's event loop and waits for its answer.
#[derive(Debug, Clone)]
pub struct ScreenBroker {
    questions: mpsc::UnboundedSender<Asked>,
}

impl ScreenBroker {
    /// A broker and the receiving end the event loop reads.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Asked>) {
        let (questions, receiver) = mpsc::unbounded_channel();
        (Self { questions }, receiver)
    }
}

#[async_trait]
impl ApprovalBroker for ScreenBroker {
    async fn wait(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
        timeout: Duration,
    ) -> Option<Decided> {
        let (answer, answered) = oneshot::channel();
        self.questions.send(Asked { request: request.clone(), answer }).ok()?;
        // Dropping `answered` (cancel, timeout) tells the screen the question is gone.
        tokio::select! {
            decided = answered => decided.ok(),
            () = cancel.cancelled() => None,
            () = tokio::time::sleep(timeout) => None,
        }
    }
}
