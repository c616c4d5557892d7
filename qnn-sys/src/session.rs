//! A backend session: logger, backend, device (with HTP SoC/arch configs) and one context.

use crate::ffi::*;
use crate::{BackendLibrary, Error, Version};
use core::ffi::c_void;
use core::ptr::{null, null_mut};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The process-wide QNN lock. On the x86 HTP simulator, executing graphs of two sessions at
/// once fails ("Could't match allocated VTCM pointer to a VXU VTCM", QNN error 1100) or crashes
/// the process, and creating a session while another executes crashed it too (both observed
/// here). So every QNN object lifecycle, graph build and graph execution made by this crate is
/// serialized on this one lock. The HTP runs one graph at a time anyway; what HeteroInfer
/// overlaps is NPU work with GPU/CPU work, which this does not restrict.
static DEVICE_LOCK: Mutex<()> = Mutex::new(());

/// Takes the process-wide QNN lock. Hold it while calling lifecycle, build or execute entries
/// of the raw function table yourself, so that they never overlap the crate's own calls. Not
/// re-entrant: do not call [`Session::new`], drop the last handle to a session, build or execute
/// a [`crate::simple`] graph while holding it.
pub fn device_lock() -> MutexGuard<'static, ()> {
    DEVICE_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The device configuration of a session: SoC model and HTP architecture as requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceChoice {
    /// Requested SoC model (`None`: backend default).
    pub soc_model: Option<u32>,
    /// Requested HTP architecture (`None`: not set).
    pub htp_arch: Option<u32>,
}

impl core::fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match (self.soc_model, self.htp_arch) {
            (None, None) => write!(f, "backend default device"),
            (Some(s), None) => write!(f, "SoC {s}"),
            (None, Some(a)) => write!(f, "HTP arch v{a}"),
            (Some(s), Some(a)) => write!(f, "SoC {s} + HTP arch v{a}"),
        }
    }
}

/// The device choice of the live backends in this process, and how many there are. On the
/// x86 simulator, graphs of a session fail (QNN error 1100, "Could't match allocated VTCM pointer
/// to a VXU VTCM") while another thread uses a session with a different device config (observed
/// for SoC 69 vs ARCH-only v75/v79 and vs the default device; same-config sessions in parallel
/// work), so a process may hold backends of one device choice at a time. On a phone there is
/// one SoC anyway.
static LIVE_DEVICE: Mutex<(DeviceChoice, usize)> = Mutex::new((
    DeviceChoice {
        soc_model: None,
        htp_arch: None,
    },
    0,
));

fn live_device() -> MutexGuard<'static, (DeviceChoice, usize)> {
    LIVE_DEVICE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Log verbosity for the backend's messages (forwarded to stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Informational.
    Info,
    /// Verbose.
    Verbose,
}

/// The environment variable that chooses the backend's log level for every session whose
/// options come from [`SessionOptions::default`]: `off`, `error`, `warn`, `info` or
/// `verbose`. It wins over [`set_default_log_level`].
pub const QNN_LOG_VAR: &str = "HETERO_QNN_LOG";

/// [`set_default_log_level`]'s choice: 0 unset, 1 off, 2 + [`LogLevel`] index otherwise.
static DEFAULT_LOG: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Chooses the log level of sessions made from [`SessionOptions::default`] when
/// [`QNN_LOG_VAR`] is not set (`None`: no logger). A program sets it once from its own
/// verbosity (engine-min's `--verbose`), before it opens a session.
pub fn set_default_log_level(level: Option<LogLevel>) {
    let v = match level {
        None => 1,
        Some(l) => 2 + l as u8,
    };
    DEFAULT_LOG.store(v, Ordering::Relaxed);
}

/// The log level [`SessionOptions::default`] uses: [`QNN_LOG_VAR`] when it names a level,
/// else [`set_default_log_level`]'s choice, else errors only.
pub fn default_log_level() -> Option<LogLevel> {
    if let Some(v) = std::env::var_os(QNN_LOG_VAR) {
        if let Some(l) = v.to_str().and_then(LogLevel::from_name) {
            return l;
        }
    }
    match DEFAULT_LOG.load(Ordering::Relaxed) {
        1 => None,
        v @ 2..=5 => Some(LogLevel::ALL[usize::from(v - 2)]),
        _ => Some(LogLevel::Error),
    }
}

impl LogLevel {
    /// Every level, least verbose first (the order of `as u8`).
    pub const ALL: [LogLevel; 4] = [
        LogLevel::Error,
        LogLevel::Warn,
        LogLevel::Info,
        LogLevel::Verbose,
    ];

    /// The level named `name` (`error`, `warn`, `info`, `verbose`; `off` is `Some(None)`),
    /// case-insensitive; `None` for another name.
    pub fn from_name(name: &str) -> Option<Option<LogLevel>> {
        Some(Some(match name.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => return Some(None),
            "error" => LogLevel::Error,
            "warn" | "warning" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "verbose" | "debug" => LogLevel::Verbose,
            _ => return None,
        }))
    }

    fn raw(self) -> QnnLog_Level_t {
        match self {
            LogLevel::Error => QNN_LOG_LEVEL_ERROR,
            LogLevel::Warn => QNN_LOG_LEVEL_WARN,
            LogLevel::Info => QNN_LOG_LEVEL_INFO,
            LogLevel::Verbose => QNN_LOG_LEVEL_VERBOSE,
        }
    }
}

/// How to set up a [`Session`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// HTP SoC model for the device config (e.g. 69 = SM8750 → v79, 57 = SM8650 → v75).
    /// `None`: the backend's default (the x86 simulator: SM8350, v68).
    pub soc_model: Option<u32>,
    /// HTP architecture (e.g. 75). Ignored by the backend when `soc_model` is set; deprecated
    /// by Qualcomm in favour of the SoC model.
    pub htp_arch: Option<u32>,
    /// Backend messages up to this level go to stderr, each line `[qnn E] ...` (E, W, I, V).
    /// `None`: no logger (the backend then prints its errors to stdout itself). Messages this
    /// crate knows to be benign on a backend version (see [`is_benign`]) are shown at
    /// `Verbose` only, whatever level the backend gave them.
    pub log_level: Option<LogLevel>,
}

impl Default for SessionOptions {
    /// No device config; the log level of [`default_log_level`] (errors only unless the
    /// program or [`QNN_LOG_VAR`] chose another).
    fn default() -> Self {
        Self {
            soc_model: None,
            htp_arch: None,
            log_level: default_log_level(),
        }
    }
}

/// Backend messages that report no fault of the caller and that nothing the caller passes can
/// avoid, with the evidence.
const BENIGN: [&str; 1] = [
    // The HTP backend of onnxruntime-qnn 2.7.0 (core API 2.40, HTP API 5.51) logs this as an
    // error once per graphCreate, from its own `applyAllGraphSettings(callerIsGraphCreate =
    // true)`, which walks the backend's *default* graph settings: it comes with an empty
    // config list as with any mix of our precision / VTCM / optimization configs, for every
    // SoC model, and the graph then finalizes and computes correctly. 66 is no
    // QnnHtpGraph_ConfigOption_t value of the headers we bind (1..=17).
    "unexpected GraphHtpSettings option 66",
];

/// Whether `msg` (one formatted backend message) is one the backend logs on every normal run
/// and that no caller config causes (see the list's evidence): such messages are shown at
/// [`LogLevel::Verbose`] only.
pub fn is_benign(msg: &str) -> bool {
    // The whole message's end, so `option 660` or a longer error is not taken for it.
    let msg = msg.trim_end();
    BENIGN.iter().any(|b| msg.ends_with(b))
}

/// The most verbose level a live logger was created with (the callback reads it to decide
/// whether a benign message, demoted to verbose, is shown).
static LOGGER_LEVEL: AtomicU32 = AtomicU32::new(0);

/// An HTP device custom config in the layout the backend expects: HTP API <= 5.46 puts the
/// value union at offset 4 (12 B), >= 5.47 at offset 8 (16 B). Using the wrong one makes a SOC
/// config fail with 14001 and an ARCH config silently ignored.
#[derive(Clone, Copy)]
pub enum HtpDeviceConfig {
    /// HTP API <= 5.46.
    Legacy(QnnHtpDevice_CustomConfigLegacy_t),
    /// HTP API >= 5.47.
    Current(QnnHtpDevice_CustomConfig_t),
}

impl core::fmt::Debug for HtpDeviceConfig {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (layout, option) = match self {
            HtpDeviceConfig::Legacy(c) => ("legacy", c.option),
            HtpDeviceConfig::Current(c) => ("current", c.option),
        };
        write!(
            f,
            "HtpDeviceConfig {{ layout: {layout}, option: {option}, bytes: {:?} }}",
            self.bytes()
        )
    }
}

impl HtpDeviceConfig {
    /// Whether a backend reporting HTP API `htp_api` uses the >= 5.47 layout.
    pub fn uses_current_layout(htp_api: Version) -> bool {
        (htp_api.major, htp_api.minor) >= (5, 47)
    }

    /// A SOC config for a backend with HTP API `htp_api`.
    pub fn soc(htp_api: Version, soc_model: u32) -> Self {
        if Self::uses_current_layout(htp_api) {
            HtpDeviceConfig::Current(QnnHtpDevice_CustomConfig_t {
                option: QNN_HTP_DEVICE_CONFIG_OPTION_SOC,
                u: QnnHtpDevice_CustomConfigValue_t {
                    arch: QnnHtpDevice_DeviceArch_t {
                        deviceId: soc_model,
                        arch: 0,
                    },
                },
            })
        } else {
            HtpDeviceConfig::Legacy(QnnHtpDevice_CustomConfigLegacy_t {
                option: QNN_HTP_DEVICE_CONFIG_OPTION_SOC,
                u: QnnHtpDevice_CustomConfigLegacyValue_t {
                    arch: QnnHtpDevice_DeviceArch_t {
                        deviceId: soc_model,
                        arch: 0,
                    },
                },
            })
        }
    }

    /// An ARCH config (`{deviceId, arch}`) for a backend with HTP API `htp_api`.
    pub fn arch(htp_api: Version, device_id: u32, arch: QnnHtpDevice_Arch_t) -> Self {
        let value = QnnHtpDevice_DeviceArch_t {
            deviceId: device_id,
            arch,
        };
        if Self::uses_current_layout(htp_api) {
            HtpDeviceConfig::Current(QnnHtpDevice_CustomConfig_t {
                option: QNN_HTP_DEVICE_CONFIG_OPTION_ARCH,
                u: QnnHtpDevice_CustomConfigValue_t { arch: value },
            })
        } else {
            HtpDeviceConfig::Legacy(QnnHtpDevice_CustomConfigLegacy_t {
                option: QNN_HTP_DEVICE_CONFIG_OPTION_ARCH,
                u: QnnHtpDevice_CustomConfigLegacyValue_t { arch: value },
            })
        }
    }

    /// Pointer to put in `QnnDevice_Config_t::u.customConfig`.
    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        match self {
            HtpDeviceConfig::Legacy(c) => (c as *mut QnnHtpDevice_CustomConfigLegacy_t).cast(),
            HtpDeviceConfig::Current(c) => (c as *mut QnnHtpDevice_CustomConfig_t).cast(),
        }
    }

    /// The option and value words as the backend reads them: `(option, word at the union
    /// offset, next word)`.
    pub fn bytes(&self) -> (u32, u32, u32) {
        match self {
            // SAFETY: both configs are built with the `arch` member, which covers the union's
            // 8 bytes with two initialized u32.
            HtpDeviceConfig::Legacy(c) => unsafe { (c.option, c.u.arch.deviceId, c.u.arch.arch) },
            // SAFETY: as above (the 8-byte union is fully covered by `arch`).
            HtpDeviceConfig::Current(c) => unsafe { (c.option, c.u.arch.deviceId, c.u.arch.arch) },
        }
    }
}

/// What `deviceGetPlatformInfo` reports for one HTP device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HtpDeviceInfo {
    /// Device id.
    pub device_id: u32,
    /// Number of cores.
    pub num_cores: u32,
    /// SoC model (the x86 simulator: 30 = SM8350 without a device config).
    pub soc_model: u32,
    /// HTP architecture (the x86 simulator: 68).
    pub arch: u32,
    /// VTCM size in MB.
    pub vtcm_mb: usize,
}

/// Forwards backend log messages to stderr. The `va_list` arrives as a pointer on x86-64 SysV
/// and aarch64 Linux/Android, and `vsnprintf` takes it the same way there.
#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
unsafe extern "C" fn log_to_stderr(
    fmt: *const core::ffi::c_char,
    level: QnnLog_Level_t,
    _timestamp: u64,
    args: *mut c_void,
) {
    use std::io::Write;
    extern "C" {
        fn vsnprintf(
            buf: *mut core::ffi::c_char,
            n: usize,
            fmt: *const core::ffi::c_char,
            ap: *mut c_void,
        ) -> i32;
    }
    if fmt.is_null() {
        return;
    }
    let mut buf = [0 as core::ffi::c_char; 1024];
    // SAFETY: buf is writable for buf.len() bytes; fmt and args are the format and va_list the
    // backend passed for this message (valid for the duration of the callback).
    unsafe { vsnprintf(buf.as_mut_ptr(), buf.len(), fmt, args) };
    // SAFETY: vsnprintf NUL-terminates within buf.len() bytes.
    let msg = unsafe { core::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    let level = if is_benign(&msg) {
        QNN_LOG_LEVEL_VERBOSE
    } else {
        level
    };
    if level > LOGGER_LEVEL.load(Ordering::Relaxed) {
        return;
    }
    let tag = match level {
        QNN_LOG_LEVEL_ERROR => "E",
        QNN_LOG_LEVEL_WARN => "W",
        QNN_LOG_LEVEL_INFO => "I",
        _ => "V",
    };
    // Errors writing to stderr are ignored: a log callback must not fail or unwind.
    let _ = writeln!(std::io::stderr().lock(), "[qnn {tag}] {}", msg.trim_end());
}

#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
const LOG_CALLBACK: QnnLog_Callback_t = Some(log_to_stderr);
#[cfg(not(all(
    any(target_os = "linux", target_os = "android"),
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
const LOG_CALLBACK: QnnLog_Callback_t = None;

/// Logger, backend and device, shared by the contexts ([`Session`]s) made from them; freed in
/// reverse creation order when the last session goes.
#[derive(Debug)]
struct Core {
    lib: Arc<BackendLibrary>,
    log: Qnn_LogHandle_t,
    backend: Qnn_BackendHandle_t,
    device: Qnn_DeviceHandle_t,
    choice: DeviceChoice,
}

// SAFETY: opaque handles owned by this value; every call through them is serialized on
// device_lock.
unsafe impl Send for Core {}
// SAFETY: as above; shared access only reads the handles.
unsafe impl Sync for Core {}

impl Drop for Core {
    fn drop(&mut self) {
        let f = *self.lib.fns();
        let _device = device_lock();
        // Errors during teardown cannot be reported from Drop; they are ignored.
        // Each handle below was created by this core and is freed once, in reverse creation
        // order, after every context made from it (sessions hold an Arc<Core>).
        if !self.device.is_null() {
            if let Some(free) = f.deviceFree {
                // SAFETY: see above.
                unsafe { free(self.device) };
            }
        }
        if !self.backend.is_null() {
            if let Some(free) = f.backendFree {
                // SAFETY: see above.
                unsafe { free(self.backend) };
            }
        }
        if !self.log.is_null() {
            if let Some(free) = f.logFree {
                // SAFETY: see above.
                unsafe { free(self.log) };
            }
        }
        let mut live = live_device();
        live.1 = live.1.saturating_sub(1);
    }
}

/// A QNN context on a logger + backend + device, freed on drop (the backend objects when the
/// last context made from them goes). Graphs created in the context live until the session is
/// dropped (QNN has no `graphFree`).
///
/// [`Session::new`] creates a new backend and device; all live ones in a process must use the
/// same [`DeviceChoice`] (else [`Error::DeviceConfigConflict`]; see the crate docs for why).
/// [`Session::new_context`] makes a further context sharing the backend and device.
///
/// Thread safety: creation, teardown, and the graph wrappers' builds and executions all take
/// the process-wide [`device_lock`], so sessions and graphs may be shared across threads freely.
#[derive(Debug)]
pub struct Session {
    core: Arc<Core>,
    context: Qnn_ContextHandle_t,
    next_id: AtomicU32,
}

// SAFETY: the context handle is an opaque token owned by this session; QNN entry points taking
// it may be called from any thread, and this crate serializes its calls on device_lock.
unsafe impl Send for Session {}
// SAFETY: as above; shared access only reads the handle, and every call this crate makes
// through it is serialized on device_lock.
unsafe impl Sync for Session {}

impl Session {
    /// Creates logger, backend, device (with the HTP SoC/arch configs from `opts`, in the
    /// layout the backend's HTP API version requires) and a context.
    pub fn new(lib: Arc<BackendLibrary>, opts: &SessionOptions) -> Result<Arc<Self>, Error> {
        let choice = DeviceChoice {
            soc_model: opts.soc_model,
            htp_arch: opts.htp_arch,
        };
        let core = {
            let _device = device_lock();
            {
                // Registered before anything is created: Core's Drop unregisters.
                let mut live = live_device();
                if live.1 > 0 && live.0 != choice {
                    return Err(Error::DeviceConfigConflict {
                        active: live.0,
                        requested: choice,
                    });
                }
                *live = (choice, live.1 + 1);
            }
            let mut c = Core {
                lib,
                log: null_mut(),
                backend: null_mut(),
                device: null_mut(),
                choice,
            };
            // On failure `c` is dropped, and its Drop frees whatever was created; that Drop
            // takes device_lock, so release ours first (the lock is not re-entrant).
            // Backend and device creation are the library's initialization: their stdout
            // writes are kept off ours too (`library_stdout`).
            let (r, _) = crate::stdout::capture(|| Self::init_core(&mut c, opts));
            if let Err(e) = r {
                drop(_device);
                drop(c);
                return Err(e);
            }
            c
        };
        Self::with_core(Arc::new(core))
    }

    fn init_core(c: &mut Core, opts: &SessionOptions) -> Result<(), Error> {
        let f = *c.lib.fns();
        if let (Some(level), Some(log_create), Some(_)) =
            (opts.log_level, f.logCreate, LOG_CALLBACK)
        {
            // The callback reads this to decide whether a demoted (benign) message is shown.
            LOGGER_LEVEL.fetch_max(level.raw(), Ordering::Relaxed);
            // SAFETY: logCreate has this signature; the callback is re-entrant (it only formats
            // into a stack buffer and writes to stderr); c.log is a valid out-pointer.
            let rc = unsafe { log_create(LOG_CALLBACK, level.raw(), &mut c.log) };
            c.lib.check("logCreate", rc)?;
        }
        let backend_create = f.backendCreate.ok_or(Error::MissingFunction {
            name: "backendCreate",
        })?;
        // SAFETY: backendCreate(logger or NULL, NULL config list, out-pointer).
        let rc = unsafe { backend_create(c.log, null(), &mut c.backend) };
        c.lib.check("backendCreate", rc)?;

        if let Some(device_create) = f.deviceCreate {
            let htp_api = c.lib.api_version().backendApiVersion;
            let mut customs: Vec<HtpDeviceConfig> = Vec::new();
            if let Some(soc) = opts.soc_model {
                customs.push(HtpDeviceConfig::soc(htp_api, soc));
            }
            if let Some(arch) = opts.htp_arch {
                customs.push(HtpDeviceConfig::arch(htp_api, 0, arch));
            }
            let configs: Vec<QnnDevice_Config_t> = customs
                .iter_mut()
                .map(|c| QnnDevice_Config_t {
                    option: QNN_CONFIG_OPTION_CUSTOM,
                    u: QnnDevice_ConfigValue_t {
                        customConfig: c.as_mut_ptr(),
                    },
                })
                .collect();
            let mut list: Vec<*const QnnDevice_Config_t> =
                configs.iter().map(|c| c as *const _).collect();
            list.push(null());
            let list_ptr = if configs.is_empty() {
                null()
            } else {
                list.as_ptr()
            };
            // SAFETY: deviceCreate(logger, NULL-terminated list of configs pointing into
            // `customs`/`configs`, which outlive the call, out-pointer).
            let rc = unsafe { device_create(c.log, list_ptr, &mut c.device) };
            c.lib.check("deviceCreate", rc)?;
        }
        Ok(())
    }

    fn with_core(core: Arc<Core>) -> Result<Arc<Self>, Error> {
        let _device = device_lock();
        let context_create = core.lib.fns().contextCreate.ok_or(Error::MissingFunction {
            name: "contextCreate",
        })?;
        let mut context: Qnn_ContextHandle_t = null_mut();
        // SAFETY: contextCreate(live backend, device or NULL, no configs, out-pointer).
        let rc = unsafe { context_create(core.backend, core.device, null(), &mut context) };
        core.lib.check("contextCreate", rc)?;
        Ok(Arc::new(Session {
            core,
            context,
            next_id: AtomicU32::new(0),
        }))
    }

    /// A further context on the same logger, backend and device (the way to have several
    /// independent sets of graphs in one process).
    pub fn new_context(&self) -> Result<Arc<Self>, Error> {
        Self::with_core(Arc::clone(&self.core))
    }

    /// The device choice (SoC model, HTP arch) this session's backend was created with.
    pub fn device_choice(&self) -> DeviceChoice {
        self.core.choice
    }

    /// The library this session runs on.
    pub fn library(&self) -> &Arc<BackendLibrary> {
        &self.core.lib
    }

    /// The function table (shortcut).
    pub fn fns(&self) -> &QnnInterface_FunctionTable_t {
        self.core.lib.fns()
    }

    /// Logger handle (NULL when logging is off).
    pub fn log_handle(&self) -> Qnn_LogHandle_t {
        self.core.log
    }

    /// Backend handle.
    pub fn backend_handle(&self) -> Qnn_BackendHandle_t {
        self.core.backend
    }

    /// Device handle (NULL when the backend has no `deviceCreate`).
    pub fn device_handle(&self) -> Qnn_DeviceHandle_t {
        self.core.device
    }

    /// Context handle.
    pub fn context_handle(&self) -> Qnn_ContextHandle_t {
        self.context
    }

    /// A number unique within this session, for graph/tensor names.
    pub fn unique_id(&self) -> u32 {
        // Relaxed: only uniqueness matters, not ordering with other memory.
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// `Ok(())` or [`Error::Qnn`] with the backend's message.
    pub fn check(&self, call: &'static str, code: Qnn_ErrorHandle_t) -> Result<(), Error> {
        self.core.lib.check(call, code)
    }

    /// The HTP devices `deviceGetPlatformInfo` reports (SoC model, arch, VTCM).
    pub fn htp_platform_info(&self) -> Result<Vec<HtpDeviceInfo>, Error> {
        let f = self.fns();
        let get = f.deviceGetPlatformInfo.ok_or(Error::MissingFunction {
            name: "deviceGetPlatformInfo",
        })?;
        let free = f.deviceFreePlatformInfo.ok_or(Error::MissingFunction {
            name: "deviceFreePlatformInfo",
        })?;
        let mut info: *const QnnDevice_PlatformInfo_t = null();
        // SAFETY: deviceGetPlatformInfo(logger, out-pointer).
        self.check("deviceGetPlatformInfo", unsafe {
            get(self.core.log, &mut info)
        })?;
        let mut out = Vec::new();
        if !info.is_null() {
            // SAFETY: on success `info` points to a version-1 platform info owned by the
            // backend until deviceFreePlatformInfo; hwDevices has numHwDevices entries.
            unsafe {
                let v1 = (*info).v1;
                for i in 0..v1.numHwDevices as usize {
                    if v1.hwDevices.is_null() {
                        break;
                    }
                    let d = (*v1.hwDevices.add(i)).v1;
                    let ext = d.deviceInfoExtension as *const QnnHtpDevice_DeviceInfoExtension_t;
                    let (soc_model, arch, vtcm_mb) = if ext.is_null() {
                        (0, 0, 0)
                    } else {
                        let on_chip = (*ext).onChipDevice;
                        (on_chip.socModel, on_chip.arch, on_chip.vtcmSize)
                    };
                    out.push(HtpDeviceInfo {
                        device_id: d.deviceId,
                        num_cores: d.numCores,
                        soc_model,
                        arch,
                        vtcm_mb,
                    });
                }
            }
            // SAFETY: `info` came from deviceGetPlatformInfo with the same logger.
            self.check("deviceFreePlatformInfo", unsafe {
                free(self.core.log, info)
            })?;
        }
        Ok(out)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(free) = self.core.lib.fns().contextFree {
            let _device = device_lock();
            // SAFETY: the context was created by this session and is freed once; no graph
            // wrapper outlives the session (they hold an Arc<Session>). Errors cannot be
            // reported from Drop and are ignored.
            unsafe { free(self.context, null_mut()) };
        }
        // The core (device, backend, logger) is freed when its last session goes.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_config_layout_follows_htp_api_version() {
        let old = Version {
            major: 5,
            minor: 46,
            patch: 0,
        };
        let new = Version {
            major: 5,
            minor: 47,
            patch: 0,
        };
        let mut a = HtpDeviceConfig::soc(old, 69);
        assert!(matches!(a, HtpDeviceConfig::Legacy(_)));
        assert_eq!(a.bytes(), (QNN_HTP_DEVICE_CONFIG_OPTION_SOC, 69, 0));
        // Legacy: the SoC number sits at byte 4; current: at byte 8.
        // SAFETY: the pointer addresses a live 12-byte legacy config; reading u32 at 4 is in bounds.
        assert_eq!(unsafe { *(a.as_mut_ptr() as *const u32).add(1) }, 69);
        let mut b = HtpDeviceConfig::soc(new, 69);
        assert!(matches!(b, HtpDeviceConfig::Current(_)));
        // SAFETY: the pointer addresses a live 16-byte current config; reading u32 at 8 is in bounds.
        assert_eq!(unsafe { *(b.as_mut_ptr() as *const u32).add(2) }, 69);
        let c = HtpDeviceConfig::arch(new, 0, 75);
        assert_eq!(c.bytes(), (QNN_HTP_DEVICE_CONFIG_OPTION_ARCH, 0, 75));
        assert!(HtpDeviceConfig::uses_current_layout(Version {
            major: 6,
            minor: 0,
            patch: 0
        }));
    }
}
