//! Run-time loading: `dlopen` by path, provider selection, typed errors.

use crate::ffi::*;
use crate::{Error, Version};
use core::ffi::{c_char, c_void, CStr};
use core::ptr::NonNull;
use std::ffi::CString;
use std::path::Path;

/// Environment variable naming the HTP backend library (`libQnnHtp.so`), absolute path.
pub const QNN_HTP_LIB_VAR: &str = "QNN_HTP_LIB";
/// Environment variable naming the QNN system library (`libQnnSystem.so`), absolute path.
pub const QNN_SYSTEM_LIB_VAR: &str = "QNN_SYSTEM_LIB";

/// Text of the last `dlerror()` on this thread, or a placeholder.
fn last_dlerror() -> String {
    // SAFETY: dlerror takes no arguments; it returns NULL or a NUL-terminated string that
    // stays valid until the next dl* call on this thread, and we copy it out immediately.
    unsafe {
        let msg = libc::dlerror();
        if msg.is_null() {
            "unknown dlerror".to_owned()
        } else {
            CStr::from_ptr(msg).to_string_lossy().into_owned()
        }
    }
}

/// An open shared library (`dlopen` with `RTLD_NOW | RTLD_LOCAL`); `dlclose` on drop.
#[derive(Debug)]
pub struct Library {
    handle: NonNull<c_void>,
    path: String,
    load_output: String,
}

// SAFETY: a dlopen handle is a process-global token; dlsym/dlclose may be called from any
// thread (glibc and bionic serialize them internally).
unsafe impl Send for Library {}
// SAFETY: as above; `&Library` only allows dlsym, which is thread-safe.
unsafe impl Sync for Library {}

impl Library {
    /// Opens the library at `path` (absolute paths avoid any search; QNN libraries find their
    /// bundled dependencies through their own RPATH). What the library's initializers write
    /// to stdout is kept off the process's stdout ([`Library::load_output`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path_str = path.as_ref().to_string_lossy().into_owned();
        let c_path = CString::new(path_str.clone()).map_err(|_| Error::LibraryNotFound {
            path: path_str.clone(),
            dlerror: "path contains a NUL byte".to_owned(),
        })?;
        // SAFETY: c_path is a valid NUL-terminated string; the flags are valid dlopen flags.
        // Loading runs the library's initializers, which is the point of this call; their
        // stdout writes are captured (the HTP simulator prints a line there).
        let (handle, load_output) = crate::stdout::capture(|| unsafe {
            libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL)
        });
        match NonNull::new(handle) {
            Some(handle) => Ok(Self {
                handle,
                path: path_str,
                load_output,
            }),
            None => Err(Error::LibraryNotFound {
                path: path_str,
                dlerror: last_dlerror(),
            }),
        }
    }

    /// The path the library was opened with.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What the library wrote to stdout while it was loaded (its initializers), kept off the
    /// process's stdout; empty when it wrote nothing. (The HTP simulator: one
    /// ` # LIBNATIVE: …` line.)
    pub fn load_output(&self) -> &str {
        &self.load_output
    }

    /// Looks up `symbol`. The address is valid while `self` lives.
    pub fn symbol(&self, symbol: &'static CStr) -> Result<NonNull<c_void>, Error> {
        // SAFETY: handle came from a successful dlopen and is not yet closed (we own it);
        // symbol is NUL-terminated.
        let p = unsafe { libc::dlsym(self.handle.as_ptr(), symbol.as_ptr()) };
        NonNull::new(p).ok_or_else(|| Error::MissingSymbol {
            path: self.path.clone(),
            symbol: symbol.to_str().unwrap_or("?"),
            dlerror: last_dlerror(),
        })
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen and is closed exactly once, here. Everything
        // borrowed from the library (function tables, strings) borrows `self`, so none of it
        // outlives this call.
        unsafe {
            libc::dlclose(self.handle.as_ptr());
        }
    }
}

/// What a caller needs from a backend library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirement {
    /// Required backend id (`Some(QNN_BACKEND_ID_HTP)`), or any.
    pub backend_id: Option<u32>,
    /// Required API version: same major, minor >= this minor (patch ignored).
    pub api: Version,
}

impl Requirement {
    /// The HTP backend with core API 2.32 or later (the layouts in [`crate::ffi`]).
    pub const HTP: Self = Self {
        backend_id: Some(QNN_BACKEND_ID_HTP),
        api: Version {
            major: 2,
            minor: 32,
            patch: 0,
        },
    };
    /// Any backend with core API 2.32 or later.
    pub const ANY_BACKEND: Self = Self {
        backend_id: None,
        api: Version {
            major: 2,
            minor: 32,
            patch: 0,
        },
    };
    /// The system library with system API 1.x.
    pub const SYSTEM: Self = Self {
        backend_id: None,
        api: Version {
            major: 1,
            minor: 0,
            patch: 0,
        },
    };

    fn compatible(&self, found: Version) -> bool {
        found.major == self.api.major && found.minor >= self.api.minor
    }
}

/// Chooses the provider among `(backend_id, version)` pairs: the first whose backend id matches
/// (if required) and whose version is compatible.
fn choose_provider(
    found: &[(u32, Version)],
    req: &Requirement,
    path: &str,
) -> Result<usize, Error> {
    if found.is_empty() {
        return Err(Error::NotQnnBackend {
            path: path.to_owned(),
            reason: "the library lists no interface providers".to_owned(),
        });
    }
    let mut best: Option<Version> = None;
    let mut id_matched = false;
    for (i, &(id, version)) in found.iter().enumerate() {
        if req.backend_id.is_some_and(|want| want != id) {
            continue;
        }
        id_matched = true;
        if req.compatible(version) {
            return Ok(i);
        }
        best = Some(best.map_or(version, |b| b.max(version)));
    }
    if !id_matched {
        return Err(Error::WrongBackend {
            found: found[0].0,
            expected: req.backend_id.unwrap_or(0),
        });
    }
    Err(Error::IncompatibleApi {
        found: best.unwrap_or_default(),
        needed: req.api,
    })
}

/// Reads the provider list from a `*_getProviders` entry point.
///
/// # Safety
/// `get` must be a `QnnInterface_getProviders`-shaped function of a loaded library.
unsafe fn provider_list<T>(
    get: unsafe extern "C" fn(*mut *const *const T, *mut u32) -> Qnn_ErrorHandle_t,
    path: &str,
) -> Result<&'static [*const T], Error> {
    let mut list: *const *const T = core::ptr::null();
    let mut n = 0u32;
    // SAFETY: the caller guarantees `get` has this signature; both out-pointers are valid.
    let rc = unsafe { get(&mut list, &mut n) };
    if rc != QNN_SUCCESS || list.is_null() {
        return Err(Error::NotQnnBackend {
            path: path.to_owned(),
            reason: format!("getProviders returned {rc} with list {list:?}"),
        });
    }
    // SAFETY: on success the library returns an array of `n` provider pointers that it owns
    // and keeps valid until it is unloaded (the 'static here is narrowed by every caller to
    // the lifetime of the `Library` it holds).
    Ok(unsafe { core::slice::from_raw_parts(list, n as usize) })
}

/// A QNN backend library (e.g. `libQnnHtp.so`) with its chosen provider. The provider and its
/// function table borrow the library, which stays loaded as long as this value lives.
#[derive(Debug)]
pub struct BackendLibrary {
    iface: NonNull<QnnInterface_t>,
    lib: Library,
}

// SAFETY: the interface is immutable library-owned data; QNN documents its entry points as
// callable from any thread (per-object serialization is the caller's job, see crate docs).
unsafe impl Send for BackendLibrary {}
// SAFETY: as above; `&BackendLibrary` exposes only reads of the immutable table.
unsafe impl Sync for BackendLibrary {}

impl BackendLibrary {
    /// Loads the backend at `path` and picks a provider meeting `req`.
    pub fn load(path: impl AsRef<Path>, req: &Requirement) -> Result<Self, Error> {
        let lib = Library::open(path)?;
        let sym = lib
            .symbol(QNN_INTERFACE_GET_PROVIDERS)
            .map_err(|e| Error::NotQnnBackend {
                path: lib.path().to_owned(),
                reason: e.to_string(),
            })?;
        // SAFETY: QnnInterface_getProviders has this C signature in every QNN backend.
        let get: QnnInterfaceGetProvidersFn_t = unsafe { core::mem::transmute(sym.as_ptr()) };
        // SAFETY: `get` is the backend's entry point (the symbol name promises the signature).
        let list = unsafe { provider_list(get, lib.path())? };
        let mut found = Vec::with_capacity(list.len());
        for &p in list {
            if p.is_null() {
                return Err(Error::NotQnnBackend {
                    path: lib.path().to_owned(),
                    reason: "NULL provider in the list".to_owned(),
                });
            }
            // SAFETY: p is a provider owned by the loaded library. Only the header fields
            // (identical in every 2.x layout) are read, through raw pointers, before the
            // version check says the whole struct has our layout.
            let (id, core) = unsafe {
                (
                    core::ptr::addr_of!((*p).backendId).read(),
                    core::ptr::addr_of!((*p).apiVersion.coreApiVersion).read(),
                )
            };
            found.push((id, core));
        }
        let i = choose_provider(&found, req, lib.path())?;
        let iface = NonNull::new(list[i].cast_mut()).ok_or_else(|| Error::NotQnnBackend {
            path: lib.path().to_owned(),
            reason: "NULL provider".to_owned(),
        })?;
        Ok(Self { iface, lib })
    }

    /// Loads the backend named by the environment variable `var` (an absolute path).
    pub fn load_from_env(var: &'static str, req: &Requirement) -> Result<Self, Error> {
        let path = std::env::var(var).map_err(|_| Error::EnvVarUnset { var })?;
        Self::load(path, req)
    }

    /// Loads the HTP backend named by `QNN_HTP_LIB` with [`Requirement::HTP`].
    pub fn load_htp() -> Result<Self, Error> {
        Self::load_from_env(QNN_HTP_LIB_VAR, &Requirement::HTP)
    }

    /// The library.
    pub fn library(&self) -> &Library {
        &self.lib
    }

    /// The chosen provider.
    pub fn interface(&self) -> &QnnInterface_t {
        // SAFETY: iface points into the loaded library (kept alive by self.lib), and the
        // version check in `load` established that it has (at least) our layout.
        unsafe { self.iface.as_ref() }
    }

    /// The function table of the chosen provider.
    pub fn fns(&self) -> &QnnInterface_FunctionTable_t {
        &self.interface().v2
    }

    /// Backend id of the provider (6 = HTP).
    pub fn backend_id(&self) -> u32 {
        self.interface().backendId
    }

    /// Core and backend API versions from the provider struct.
    pub fn api_version(&self) -> Qnn_ApiVersion_t {
        self.interface().apiVersion
    }

    /// The provider name, if the library gives one.
    pub fn provider_name(&self) -> Option<String> {
        let p = self.interface().providerName;
        // SAFETY: a non-NULL providerName is a NUL-terminated string owned by the library.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// `backendGetApiVersion`.
    pub fn query_api_version(&self) -> Result<Qnn_ApiVersion_t, Error> {
        let f = self
            .fns()
            .backendGetApiVersion
            .ok_or(Error::MissingFunction {
                name: "backendGetApiVersion",
            })?;
        let mut v = Qnn_ApiVersion_t::default();
        // SAFETY: f is the library's entry with this signature; v is a valid out-pointer.
        self.check("backendGetApiVersion", unsafe { f(&mut v) })?;
        Ok(v)
    }

    /// `backendGetBuildId`, e.g. `v2.51.0.260929181845`.
    pub fn build_id(&self) -> Result<String, Error> {
        let f = self.fns().backendGetBuildId.ok_or(Error::MissingFunction {
            name: "backendGetBuildId",
        })?;
        let mut p: *const c_char = core::ptr::null();
        // SAFETY: f has this signature; p is a valid out-pointer.
        self.check("backendGetBuildId", unsafe { f(&mut p) })?;
        if p.is_null() {
            return Ok(String::new());
        }
        // SAFETY: on success p is a static NUL-terminated string owned by the library.
        Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// The backend's text for an error handle (`errorGetMessage`), or a placeholder.
    pub fn error_message(&self, code: Qnn_ErrorHandle_t) -> String {
        let Some(f) = self.fns().errorGetMessage else {
            return "(no errorGetMessage in this library)".to_owned();
        };
        let mut p: *const c_char = core::ptr::null();
        // SAFETY: f has this signature; p is a valid out-pointer.
        let rc = unsafe { f(code, &mut p) };
        if rc != QNN_SUCCESS || p.is_null() {
            return format!("(errorGetMessage returned {rc})");
        }
        // SAFETY: on success p is a static NUL-terminated string owned by the library.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// `Ok(())` for `QNN_SUCCESS`, else [`Error::Qnn`] with the backend's message.
    pub fn check(&self, call: &'static str, code: Qnn_ErrorHandle_t) -> Result<(), Error> {
        if code == QNN_SUCCESS {
            Ok(())
        } else {
            Err(Error::Qnn {
                call,
                code,
                message: self.error_message(code),
            })
        }
    }
}

/// The QNN system library (`libQnnSystem.so`) with its chosen provider.
#[derive(Debug)]
pub struct SystemLibrary {
    iface: NonNull<QnnSystemInterface_t>,
    lib: Library,
}

// SAFETY: as for BackendLibrary: immutable library-owned table, thread-safe entry points.
unsafe impl Send for SystemLibrary {}
// SAFETY: as above.
unsafe impl Sync for SystemLibrary {}

impl SystemLibrary {
    /// Loads the system library at `path` and picks a provider meeting `req`
    /// (usually [`Requirement::SYSTEM`]).
    pub fn load(path: impl AsRef<Path>, req: &Requirement) -> Result<Self, Error> {
        let lib = Library::open(path)?;
        let sym = lib.symbol(QNN_SYSTEM_INTERFACE_GET_PROVIDERS)?;
        // SAFETY: QnnSystemInterface_getProviders has this C signature.
        let get: QnnSystemInterfaceGetProvidersFn_t = unsafe { core::mem::transmute(sym.as_ptr()) };
        // SAFETY: `get` is the system library's entry point.
        let list = unsafe { provider_list(get, lib.path())? };
        let mut found = Vec::with_capacity(list.len());
        for &p in list {
            if p.is_null() {
                return Err(Error::NotQnnBackend {
                    path: lib.path().to_owned(),
                    reason: "NULL provider in the list".to_owned(),
                });
            }
            // SAFETY: p is a provider owned by the loaded library; header fields only.
            let (id, v) = unsafe {
                (
                    core::ptr::addr_of!((*p).backendId).read(),
                    core::ptr::addr_of!((*p).systemApiVersion).read(),
                )
            };
            found.push((id, v));
        }
        let i = choose_provider(&found, req, lib.path())?;
        let iface = NonNull::new(list[i].cast_mut()).ok_or_else(|| Error::NotQnnBackend {
            path: lib.path().to_owned(),
            reason: "NULL provider".to_owned(),
        })?;
        Ok(Self { iface, lib })
    }

    /// Loads the system library named by `QNN_SYSTEM_LIB`.
    pub fn load_from_env() -> Result<Self, Error> {
        let path = std::env::var(QNN_SYSTEM_LIB_VAR).map_err(|_| Error::EnvVarUnset {
            var: QNN_SYSTEM_LIB_VAR,
        })?;
        Self::load(path, &Requirement::SYSTEM)
    }

    /// The library.
    pub fn library(&self) -> &Library {
        &self.lib
    }

    /// The chosen provider.
    pub fn interface(&self) -> &QnnSystemInterface_t {
        // SAFETY: iface points into the loaded library, kept alive by self.lib.
        unsafe { self.iface.as_ref() }
    }

    /// The system API version.
    pub fn api_version(&self) -> Version {
        self.interface().systemApiVersion
    }

    /// The function table.
    pub fn fns(&self) -> &QnnSystemInterface_FunctionTable_t {
        &self.interface().v1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn v(major: u32, minor: u32) -> Version {
        Version {
            major,
            minor,
            patch: 0,
        }
    }

    #[test]
    fn provider_choice() {
        let req = Requirement::HTP;
        assert_eq!(choose_provider(&[(6, v(2, 40))], &req, "x"), Ok(0));
        assert_eq!(
            choose_provider(&[(6, v(2, 10)), (6, v(2, 32))], &req, "x"),
            Ok(1)
        );
        assert_eq!(
            choose_provider(&[(2, v(2, 40))], &req, "x"),
            Err(Error::WrongBackend {
                found: 2,
                expected: 6
            })
        );
        assert_eq!(
            choose_provider(&[(6, v(2, 7)), (6, v(3, 0))], &req, "x"),
            Err(Error::IncompatibleApi {
                found: v(3, 0),
                needed: v(2, 32)
            })
        );
        assert!(matches!(
            choose_provider(&[], &req, "x"),
            Err(Error::NotQnnBackend { .. })
        ));
        assert_eq!(
            choose_provider(&[(4, v(2, 33))], &Requirement::ANY_BACKEND, "x"),
            Ok(0)
        );
    }

    #[test]
    fn missing_library_is_a_typed_error() {
        match Library::open("/nonexistent/libQnnHtp.so") {
            Err(Error::LibraryNotFound { path, dlerror }) => {
                assert_eq!(path, "/nonexistent/libQnnHtp.so");
                assert!(!dlerror.is_empty());
            }
            other => panic!("expected LibraryNotFound, got {other:?}"),
        }
    }
}
