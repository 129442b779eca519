use super::*;
use crate::repository::ControlMode;

fn serve(args: &[&str]) -> Result<ServeArgs, clap::Error> {
    let mut full = vec!["tessera", "serve"];
    full.extend_from_slice(args);
    Cli::try_parse_from(full).map(|c| match c.command {
        Command::Serve(s) => *s,
        Command::Guest(_) | Command::CompileComponent { .. } | Command::Seal { .. } => {
            unreachable!("parsed a serve command line")
        }
    })
}

#[test]
fn takes_the_flags_kserve_and_modelmesh_pass() {
    let modelmesh = serve(&[
        "--model-repository=/models/_triton_models",
        "--model-control-mode=explicit",
        "--strict-model-config=false",
        "--strict-readiness=false",
        "--allow-http=true",
        "--allow-sagemaker=false",
        "--model-load-thread-count=4",
    ])
    .unwrap();
    assert!(modelmesh.server_config(true).is_ok());
    let kserve =
        serve(&["--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080", "--allow-grpc=true"]).unwrap();
    assert_eq!((kserve.grpc_port, kserve.http_port), (9000, 8080));
    let sagemaker = serve(&["--model-store=/m", "--allow-sagemaker=true"]).unwrap();
    let refused = sagemaker.server_config(true).err().unwrap_or_default();
    assert!(refused.contains("not implemented"), "{refused}");
}

#[test]
fn required_models_repeat_or_split_on_commas() {
    let a = serve(&["--model-store=/m", "--required-model=a,b", "--required-model", "c"]).unwrap();
    assert_eq!(a.required_models, ["a", "b", "c"]);
    assert_eq!(a.server_config(false).map(|c| c.required_models).unwrap_or_default(), ["a", "b", "c"]);
}

#[test]
fn accepts_triton_flag_spellings() {
    let a = serve(&[
        "--model-store=/a",
        "--model-repository",
        "/b",
        "--exit-on-error=false",
        "--strict-model-config",
        "true",
        "--model-control-mode=explicit",
        "--load-model=x",
        "--load-model",
        "*",
        "--http-port=9000",
        "--log-verbose=1",
        "--http-port=9001",
    ])
    .unwrap();
    assert_eq!(a.model_repository, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
    assert!(!a.exit_on_error);
    assert!(a.strict_config());
    assert_eq!(a.model_control_mode, ControlMode::Explicit);
    assert_eq!(a.load_model, vec!["x", "*"]);
    assert_eq!(a.http_port, 9001, "the last occurrence wins, as in Triton");
    assert_eq!(a.grpc_port, 8001);
    assert_eq!(a.metrics_port, 8002);
}

#[test]
fn rejects_unknown_flags_and_bad_values() {
    let err = serve(&["--model-repository=/a", "--no-such-flag"]).unwrap_err().to_string();
    assert!(err.contains("--no-such-flag"), "{err}");
    assert!(serve(&["--model-repository=/a", "--exit-on-error=maybe"]).is_err());
    assert!(serve(&["--model-repository=/a", "--model-control-mode=sometimes"]).is_err());
    assert!(serve(&[]).is_err(), "a model repository is required");
}

#[test]
fn client_shared_memory_is_off_unless_asked_for_as_in_triton_2_7x() {
    let config = |args: &[&str]| serve(args).unwrap().server_config(false).unwrap();
    assert!(!config(&["--model-repository", "/m"]).allow_client_shm);
    assert!(config(&["--model-repository", "/m", "--allow-client-shm=true"]).allow_client_shm);
}

#[test]
fn guest_env_repeats_or_splits_on_commas_and_refuses_a_bare_star() {
    let a = serve(&["--model-store=/m", "--guest-env=APP_*,LANG", "--guest-env", "TZ"]).unwrap();
    assert_eq!(a.guest_env, ["APP_*", "LANG", "TZ"]);
    assert!(a.server_config(false).is_ok());
    assert!(serve(&["--model-store=/m"]).unwrap().guest_env.is_empty());
    let star = serve(&["--model-store=/m", "--guest-env=*"]).unwrap();
    let refused = star.server_config(false).err().unwrap_or_default();
    assert!(refused.contains("name the variables"), "{refused}");
    let jobs = serve(&["--model-store=/m", "--python-guest-build-jobs=3"]).unwrap();
    assert_eq!(jobs.server_config(false).map(|c| c.python.build_jobs).unwrap_or_default(), 3);
}
