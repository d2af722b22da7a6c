//! `ProviderClient` and the environment's proxy: a loopback base URL (the provider double's) is
//! reached directly unless the builder asks for the proxy; any other host goes through it.
//!
//! One test in a binary of its own: it sets `HTTP_PROXY`, which every client built in the
//! process reads, so no other test may run beside it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aip_connector::provider::ProviderClient;
use aip_connector_testkit::ProviderDouble;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A stand-in proxy on loopback: counts the requests it gets and answers each `{"via":"proxy"}`.
async fn start_proxy() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a port");
    let address = listener.local_addr().expect("a bound address");
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buffer = [0_u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => head.extend_from_slice(&buffer[..read]),
                    }
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let body = br#"{"via":"proxy"}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.write_all(body).await;
            });
        }
    });
    (format!("http://{address}"), seen)
}

async fn fetch(client: &ProviderClient) -> Value {
    client
        .get("/anything")
        .send_json::<Value>()
        .await
        .expect("an answer")
}

#[tokio::test]
async fn loopback_providers_skip_the_environments_proxy_unless_asked() {
    let (proxy_url, through_proxy) = start_proxy().await;
    // Before any client of this process is built: reqwest reads the variables then.
    #[allow(unsafe_code)]
    // SAFETY: the only test of this binary sets them before it starts anything that reads the
    // environment; no other thread of the process reads or writes it meanwhile.
    unsafe {
        std::env::set_var("HTTP_PROXY", &proxy_url);
        std::env::set_var("http_proxy", &proxy_url);
        std::env::remove_var("NO_PROXY");
        std::env::remove_var("no_proxy");
    }
    let (double, _provider) = ProviderDouble::start().await;
    let port = double.addr().port();

    // The double's own URL, and `localhost` naming the same port: straight to the double.
    for base in [
        double.base_url().to_owned(),
        format!("http://localhost:{port}"),
    ] {
        let client = ProviderClient::builder(&base).build().expect("a client");
        let answer = fetch(&client).await;
        assert_ne!(answer, serde_json::json!({"via": "proxy"}), "{base}");
    }
    assert_eq!(
        through_proxy.load(Ordering::SeqCst),
        0,
        "loopback went through the proxy"
    );

    // Asked for, the proxy gets loopback requests too.
    let proxied = ProviderClient::builder(double.base_url())
        .proxy_from_environment(true)
        .build()
        .expect("a client");
    assert_eq!(fetch(&proxied).await, serde_json::json!({"via": "proxy"}));
    assert_eq!(through_proxy.load(Ordering::SeqCst), 1);

    // Any other host still goes through it by default (the name is never resolved: the proxy
    // answers for it).
    let remote = ProviderClient::builder("http://api.example.invalid")
        .build()
        .expect("a client");
    assert_eq!(fetch(&remote).await, serde_json::json!({"via": "proxy"}));
    assert_eq!(through_proxy.load(Ordering::SeqCst), 2);

    // Turned off, nothing goes through it: the unresolvable name fails as unreachable.
    let direct = ProviderClient::builder("http://api.example.invalid")
        .proxy_from_environment(false)
        .build()
        .expect("a client");
    let refused = direct
        .get("/anything")
        .send_json::<Value>()
        .await
        .unwrap_err();
    assert_eq!(refused.code, "provider.unavailable", "{refused:?}");
    assert_eq!(through_proxy.load(Ordering::SeqCst), 2);
}
