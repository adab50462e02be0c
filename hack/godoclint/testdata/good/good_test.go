package good

func TestHelperUndocumented() {}
