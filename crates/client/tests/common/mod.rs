//! One `queen` process on its own embedded PostgreSQL for an SDK test file: started and
//! checked healthy by [`Broker::start`], stopped and its files removed by [`Broker::stop`].

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

pub struct Broker {
    pub url: String,
    child: Child,
    dir: PathBuf,
    log: PathBuf,
}

impl Broker {
    /// Starts a broker whose data lives in a scratch directory named after `what`.
    pub async fn start(what: &str) -> Broker {
        let queen = queen_launch::locate_queen(None).expect("queen binary");
        let dir = std::env::temp_dir().join(format!("queen-sdk-{what}-{}", std::process::id()));
        let port = queen_launch::free_port().expect("port");
        let log = dir.with_extension("log");
        let env = [("QUEEN_DATA_DIR".to_string(), dir.display().to_string())];
        let mut child = queen_launch::spawn_broker(&queen, port, &env, &log).expect("spawn");
        let url = format!("http://127.0.0.1:{port}");
        let boot = queen_launch::wait_healthy(&url, &mut child, queen_launch::BOOT_TIMEOUT).await;
        if let Err(e) = boot {
            panic!("{e}: {}", queen_launch::log_tail(&log, 30));
        }
        Broker {
            url,
            child,
            dir,
            log,
        }
    }

    pub fn stop(mut self) {
        queen_launch::terminate(&mut self.child, Duration::from_secs(20));
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.log);
    }
}
