//! A real headless Chromium, driven over the W3C WebDriver protocol by
//! Debian's chromedriver (installed by scripts/test.sh). The protocol is
//! JSON over HTTP; the few commands the console tests use are spoken here
//! directly with the HTTP client the tests already have.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The key WebDriver names an element by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
const WAIT: Duration = Duration::from_secs(30);

pub struct Browser {
    driver: Child,
    profile: String,
    base: String,
    session: String,
    http: reqwest::Client,
}

/// An element of the current page.
#[derive(Clone, Debug)]
pub struct Element(String);

fn binary(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session.
    pub async fn start() -> Self {
        let port = super::ingress::free_port();
        let driver = Command::new(binary(
            "EXECPLANE_TEST_CHROMEDRIVER",
            "/usr/bin/chromedriver",
        ))
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (scripts/test.sh installs Debian's chromium-driver)");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let deadline = Instant::now() + WAIT;
        while http.get(format!("{base}/status")).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempdir();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": binary("EXECPLANE_TEST_CHROMIUM", "/usr/bin/chromium"),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--window-size=1280,1400",
                    "--no-first-run", "--disable-extensions", "--disable-breakpad",
                    "--disable-crash-reporter",
                    format!("--user-data-dir={profile}"),
                ],
            },
        }}});
        let reply: Value = json_of(
            http.post(format!("{base}/session"))
                .header("content-type", "application/json")
                .body(capabilities.to_string())
                .send()
                .await
                .expect("chromedriver answers"),
        )
        .await;
        let session = reply["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {reply}"))
            .to_owned();
        Self {
            driver,
            profile,
            base,
            session,
            http,
        }
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut request = self.http.request(method, &url);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let reply = json_of(
            request
                .send()
                .await
                .unwrap_or_else(|error| panic!("{path}: {error}")),
        )
        .await;
        reply["value"].clone()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let value = self.command(reqwest::Method::POST, path, Some(body)).await;
        if let Some(error) = value.get("error") {
            panic!("WebDriver {path}: {error} {}", value["message"]);
        }
        value
    }

    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    pub async fn url(&self) -> String {
        self.command(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The elements `css` selects now.
    pub async fn all(&self, css: &str) -> Vec<Element> {
        let value = self
            .post("/elements", json!({"using": "css selector", "value": css}))
            .await;
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|element| element[ELEMENT].as_str())
            .map(|id| Element(id.to_owned()))
            .collect()
    }

    /// The first element `css` selects, waiting for it up to 30 s.
    pub async fn find(&self, css: &str) -> Element {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(element) = self.all(css).await.into_iter().next() {
                return element;
            }
            assert!(
                Instant::now() < deadline,
                "no `{css}` on {} within {WAIT:?}:\n{}",
                self.url().await,
                self.script("return document.body.innerText", json!([]))
                    .await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn text(&self, element: &Element) -> String {
        self.command(
            reqwest::Method::GET,
            &format!("/element/{}/text", element.0),
            None,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// The text of the first element `css` selects.
    pub async fn text_of(&self, css: &str) -> String {
        let element = self.find(css).await;
        self.text(&element).await
    }

    pub async fn click(&self, css: &str) {
        let element = self.find(css).await;
        self.post(&format!("/element/{}/click", element.0), json!({}))
            .await;
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.post(
            &format!("/element/{}/value", element.0),
            json!({ "text": text }),
        )
        .await;
    }

    /// Runs `script` in the page (a function body; `arguments` are `args`).
    pub async fn script(&self, script: &str, args: Value) -> Value {
        self.command(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// The page as a PNG.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let value = self
            .command(reqwest::Method::GET, "/screenshot", None)
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap_or_default())
            .unwrap()
    }

    /// The browser's cookies for the current page, as `name=value` pairs.
    pub async fn cookies(&self) -> Vec<(String, Value)> {
        self.command(reqwest::Method::GET, "/cookie", None)
            .await
            .as_array()
            .into_iter()
            .flatten()
            .map(|cookie| {
                (
                    cookie["name"].as_str().unwrap_or_default().to_owned(),
                    cookie.clone(),
                )
            })
            .collect()
    }

    /// Waits until `condition` (a script returning a boolean) holds.
    pub async fn wait_until(&self, what: &str, condition: &str) {
        let deadline = Instant::now() + WAIT;
        while self.script(condition, json!([])).await != json!(true) {
            assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn json_of(response: reqwest::Response) -> Value {
    let bytes = response.bytes().await.unwrap();
    serde_json::from_slice(&bytes).unwrap_or_else(|error| {
        panic!(
            "WebDriver answered {error}: {}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

fn tempdir() -> String {
    let dir = std::env::temp_dir().join(format!("execplane-chromium-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.display().to_string()
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the session (Chromium quits), then the driver.
        let url = format!("{}/session/{}", self.base, self.session);
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                reqwest::Client::new()
                    .delete(&url)
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await
            })?;
            anyhow::Ok(())
        })
        .join();
        let _ = Command::new("kill")
            .args(["-TERM", &self.driver.id().to_string()])
            .status();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
