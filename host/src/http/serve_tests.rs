use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
const GET_SLOW: &[u8] = b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";

/// Reads one response whose body ends with `end` (the handlers' bodies are short and known).
async fn response(stream: &mut TcpStream, end: &str) -> String {
    let mut data = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&data).ends_with(end) {
        let n = stream.read(&mut chunk).await.expect("read");
        assert!(n > 0, "closed before answering: {}", String::from_utf8_lossy(&data));
        data.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&data).to_lowercase()
}

/// What the stream carries until the server closes it.
async fn rest(stream: &mut TcpStream) -> String {
    let mut data = Vec::new();
    stream.read_to_end(&mut data).await.expect("read to the end");
    String::from_utf8_lossy(&data).to_lowercase()
}

/// Whether connecting to `address` is refused within a few turns of the (one-thread) runtime.
async fn refused(address: std::net::SocketAddr) -> bool {
    for _ in 0..20 {
        if TcpStream::connect(address).await.is_err() {
            return true;
        }
        tokio::task::yield_now().await;
    }
    false
}

// One thread, so that nothing the server does happens between two statements of the test that do
// not await: the request below is in the socket, unread, when the stop comes.
#[tokio::test(flavor = "current_thread")]
async fn at_the_stop_new_clients_are_refused_and_requests_already_sent_are_answered() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let (entered, release) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let (slow_entered, slow_release) = (Arc::clone(&entered), Arc::clone(&release));
    let router = Router::new().route("/", axum::routing::get(|| async { "hello" })).route(
        "/slow",
        axum::routing::get(move || {
            let (entered, release) = (Arc::clone(&slow_entered), Arc::clone(&slow_release));
            async move {
                entered.notify_one();
                release.notified().await;
                "slow"
            }
        }),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let threads = Arc::new(ConnectionThreads::start(0).expect("no threads"));
    let server =
        tokio::spawn(serve(listener, router, ConnectionLimits::default(), Access::default(), threads, stopped));
    // Three keep-alive connections, each served once and now idle.
    let mut connections = Vec::new();
    for _ in 0..3 {
        let mut c = TcpStream::connect(address).await.expect("connect");
        c.write_all(GET).await.expect("write");
        assert!(response(&mut c, "hello").await.contains("200 ok"));
        connections.push(c);
    }
    let [busy, unread, idle] = &mut connections[..] else { unreachable!() };
    busy.write_all(GET_SLOW).await.expect("write");
    entered.notified().await;
    // A request written on an idle connection, and the stop before the server has read it.
    unread.write_all(GET).await.expect("write");
    stop.send(true).expect("the server listens");

    assert!(refused(address).await, "a new client was not refused at the stop");
    assert_eq!(rest(idle).await, "", "the idle connection is closed at once");
    let answered = rest(unread).await;
    assert!(answered.contains("200 ok") && answered.ends_with("hello"), "{answered}");
    assert!(answered.contains("connection: close"), "{answered}");
    release.notify_one();
    let answered = rest(busy).await;
    assert!(answered.contains("200 ok") && answered.ends_with("slow"), "{answered}");
    server.await.expect("joined").expect("served");
}

#[tokio::test]
async fn a_connection_that_never_sends_a_request_is_closed_after_the_header_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let router = Router::new().route("/", axum::routing::get(|| async { "hello" }));
    let limits = ConnectionLimits {
        header_read: Duration::from_millis(200),
        keepalive_idle: Duration::from_secs(600),
        ..ConnectionLimits::default()
    };
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let threads = Arc::new(ConnectionThreads::start(0).expect("no threads"));
    tokio::spawn(serve(listener, router, limits, Access::default(), threads, stopped));
    let started = Instant::now();
    let mut silent = TcpStream::connect(address).await.expect("connect");
    let closed = tokio::time::timeout(Duration::from_secs(5), rest(&mut silent)).await;
    assert_eq!(closed.as_deref().ok(), Some(""), "a silent connection stayed open");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    // A connection that has been used is kept for the keep-alive time, not the header's.
    let mut used = TcpStream::connect(address).await.expect("connect");
    used.write_all(GET).await.expect("write");
    response(&mut used, "hello").await;
    let still_open = tokio::time::timeout(Duration::from_millis(600), rest(&mut used)).await;
    assert!(still_open.is_err(), "a used keep-alive connection was closed after the header timeout");
}
