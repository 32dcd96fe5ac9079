//! A pseudo-terminal for tests that need cudal1 to see a terminal: its progress lines, and Ctrl-C
//! typed as a key (the terminal driver turns it into SIGINT for the foreground process group).

use std::ffi::CStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child running on the slave side of a fresh pseudo-terminal, its controlling terminal.
pub struct Terminal {
    pub child: Child,
    master: File,
    screen: Arc<Mutex<String>>,
}

impl Terminal {
    /// Starts `cmd` with stdin, stdout and stderr on a `columns`-wide terminal.
    pub fn spawn(mut cmd: Command, columns: u16) -> Terminal {
        // SAFETY: plain libc calls on a descriptor we own; ptsname_r writes into our buffer.
        let (master, slave) = unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(fd >= 0, "posix_openpt");
            assert_eq!(libc::grantpt(fd), 0);
            assert_eq!(libc::unlockpt(fd), 0);
            let size = libc::winsize { ws_row: 50, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0 };
            assert_eq!(libc::ioctl(fd, libc::TIOCSWINSZ, &size), 0);
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
            (File::from_raw_fd(fd), CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned())
        };
        let tty = || std::fs::OpenOptions::new().read(true).write(true).open(&slave).unwrap();
        cmd.stdin(Stdio::from(tty())).stdout(Stdio::from(tty())).stderr(Stdio::from(tty()));
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        let screen = Arc::new(Mutex::new(String::new()));
        let (mut reader, seen) = (master.try_clone().unwrap(), Arc::clone(&screen));
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once every process on the terminal has gone.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Terminal { child, master, screen }
    }

    /// Everything written to the terminal so far.
    pub fn screen(&self) -> String {
        self.screen.lock().unwrap().clone()
    }

    /// Waits until the screen shows `text` (panics after `within`).
    pub fn wait_for(&self, text: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.screen().contains(text) {
            assert!(
                Instant::now() < deadline,
                "`{text}` never showed; the screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types Ctrl-C.
    pub fn ctrl_c(&mut self) {
        self.master.write_all(&[0x03]).unwrap();
    }
}
