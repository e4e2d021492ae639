# expect: multiple_env_classes
class FirstEnv:
    def reset(self, seed=None):
        return "hi", {}


class SecondEnv(FirstEnv):
    pass
