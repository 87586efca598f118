//! The OpenBao dev server that scripts/openbao.sh starts, administered
//! with its root token over the HTTP API.

use serde_json::{json, Value};

/// The server's address and root token, and a client.
pub struct Bao {
    pub address: String,
    pub root: String,
    pub client: reqwest::Client,
}

impl Bao {
    pub fn new() -> Self {
        let address = std::env::var("EXECPLANE_TEST_VAULT_ADDR")
            .unwrap_or_else(|_| "http://127.0.0.1:8200".into());
        let file = std::env::var("EXECPLANE_TEST_VAULT_TOKEN_FILE").unwrap_or_else(|_| {
            format!("{}/.stack/openbao-root-token", env!("CARGO_MANIFEST_DIR"))
        });
        let root = std::fs::read_to_string(&file)
            .unwrap_or_else(|_| panic!("{file}: start OpenBao with scripts/openbao.sh"))
            .trim()
            .to_owned();
        Self {
            address,
            root,
            client: reqwest::Client::new(),
        }
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .client
            .request(method, format!("{}/v1/{path}", self.address))
            .header("x-vault-token", &self.root);
        if let Some(body) = body {
            request = request.body(body.to_string());
        }
        let response = request.send().await.expect("OpenBao answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn put(&self, path: &str, data: Value) {
        let (status, body) = self
            .call(
                reqwest::Method::POST,
                &format!("secret/data/{path}"),
                Some(json!({"data": data})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
}
